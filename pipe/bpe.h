/* pipe/bpe.h: GPT-2's byte-level BPE tokenizer, from the vocab.json and merges.txt files GPT-2
 * ships (the user points to them; brigade ships none).
 *
 * Encoding, as the reference tokenizer does: the text is split by GPT-2's pattern
 * ('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+), each piece's bytes
 * are mapped to printable characters (bytes_to_unicode: the printable Latin-1 bytes stand for
 * themselves, the others for U+0100 onwards in byte order), the pieces are merged pair by pair,
 * the lowest-ranked pair of merges.txt first, and each result is looked up in vocab.json.
 * \p{L} and \p{N} are Unicode's letter and number categories (pipe/unicode_classes.h, generated
 * from Unicode 14 by scripts/gen_unicode_classes.py: scripts' own digits, superscripts and
 * fractions are numbers; their punctuation and symbols are neither); \s is Unicode's White_Space
 * (tab to carriage return, space, U+0085, U+00A0, U+1680, U+2000..U+200A, U+2028, U+2029,
 * U+202F, U+205F, U+3000). Decoding maps ids back to bytes. */
#ifndef BRIGADE_PIPE_BPE_H
#define BRIGADE_PIPE_BPE_H

#include <stddef.h>
#include <stdint.h>

typedef struct pipe_bpe pipe_bpe;

/* Loads vocab.json (token -> id) and merges.txt (one "a b" per line, ranked by line; a first line
 * starting with "#version" is skipped). Errors name the file and the line. */
int pipe_bpe_load(pipe_bpe **out, const char *vocab_path, const char *merges_path);
void pipe_bpe_free(pipe_bpe *b);
int pipe_bpe_vocab(const pipe_bpe *b); /* the largest id + 1 */
/* Encodes n bytes of text: *ids (caller frees) of *count ids. A piece no vocabulary entry covers
 * is an error naming it. */
int pipe_bpe_encode(const pipe_bpe *b, const char *text, size_t n, int32_t **ids, size_t *count);
/* The pre-split alone: the byte offset where each piece of the n bytes of text ends, in order
 * (*ends: caller frees; *count pieces). */
int pipe_bpe_split(const char *text, size_t n, size_t **ends, size_t *count);
/* The last place in text[0..n) where GPT-2's pattern cuts whatever comes before and after: just
 * before a space that follows a printable ASCII character (no piece runs from a non-space into a
 * space); 0 when there is none. Encoding text[0..cut) and text[cut..n) apart gives the ids of
 * encoding them together, so a long text can be encoded a block at a time. */
size_t pipe_bpe_last_cut(const char *text, size_t n);
/* The bytes token id stands for into buf (at most cap), their count; -1 for an unknown id. */
int pipe_bpe_decode(const pipe_bpe *b, int32_t id, char *buf, int cap);

#endif
