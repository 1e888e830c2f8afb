#!/usr/bin/env python3
"""Writes the checkpoint cases of tests/malformed/ckpt (pipe/ckpt.h's layout: "BRIGADE\\0", u32
version, records {u32 name length, name, u32 dtype, u64 count, data}, u32 record count, u64
FNV-1a of every byte before it). Run from this folder; the outputs are committed."""
import struct

def fnv(b):
    h = 0xcbf29ce484222325
    for x in b:
        h = ((h ^ x) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return h

def rec(name, dtype, count, data):
    n = name.encode()
    return struct.pack('<I', len(n)) + n + struct.pack('<IQ', dtype, count) + data

def ckpt(records, nrec=None, magic=b'BRIGADE\0', version=1, fix_hash=True, extra=b''):
    body = magic + struct.pack('<I', version) + b''.join(records) + extra
    body += struct.pack('<I', len(records) if nrec is None else nrec)
    return body + struct.pack('<Q', fnv(body) if fix_hash else 0)

CFG = b'model = { seq_len = 8; d_model = 8; n_heads = 2; layers = ({ type = "embedding"; name = "e"; }, { type = "lm_head"; name = "h"; }, { type = "cross_entropy"; name = "l"; }); };\n'
good = [rec('step', 1, 1, struct.pack('<q', 1)), rec('opt_t', 1, 1, struct.pack('<q', 1)),
        rec('vocab', 1, 1, struct.pack('<q', 256)), rec('layer.0.params', 0, 4, b'\0' * 16),
        rec('config', 2, len(CFG), CFG)]
cases = {
    'no_layers.ckpt': ckpt(good),  # well formed, but holds none of the model's layers
    'truncated.ckpt': ckpt(good)[:60],
    'bad_magic.ckpt': ckpt(good, magic=b'BRIGADX\0'),
    'bad_version.ckpt': ckpt(good, version=7),
    'bad_hash.ckpt': ckpt(good, fix_hash=False),
    'huge_record_count.ckpt': ckpt(good, nrec=0xFFFFFFFF),
    'huge_data_count.ckpt': ckpt([rec('step', 1, 1 << 61, b'\0' * 8)]),
    'huge_name.ckpt': ckpt([struct.pack('<I', 0xFFFFFFF0) + b'x' * 16]),
    'unknown_dtype.ckpt': ckpt([rec('step', 9, 1, b'\0' * 8)]),
    'trailing_bytes.ckpt': ckpt(good, extra=b'\0' * 5),
    'wrong_step_type.ckpt': ckpt([rec('step', 0, 2, b'\0' * 8)] + good[1:]),
    'bad_config.ckpt': ckpt(good[:4] + [rec('config', 2, 9, b'model = {')]),
    'bad_vocab.ckpt': ckpt(good[:2] + [rec('vocab', 1, 1, struct.pack('<q', -5))] + good[3:]),
    'huge_vocab.ckpt': ckpt(good[:2] + [rec('vocab', 1, 1, struct.pack('<q', 1 << 40))] + good[3:]),
    'empty.ckpt': b'',
}
for name, data in cases.items():
    open(name, 'wb').write(data)
