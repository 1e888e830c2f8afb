#!/bin/sh
# POSIX sh. The whole GPU session in one run, on the machine with the GPU, in the repo root:
#     sh scripts/gpu_session.sh          (with .gpu/ from scripts/gpu_carry.sh; see docs/backends.md)
# 1. prints what the machine has (GPU, nvcc, compilers, mpirun, libconfig/Criterion/OpenBLAS);
# 2. when brigade's libraries or mpirun are missing, unpacks the .debs that scripts/gpu_carry.sh
#    put in .gpu/debs with dpkg -x into a private prefix (never into /), and points PATH,
#    LD_LIBRARY_PATH, LIBRARY_PATH, CPATH, PKG_CONFIG_PATH and OPAL_PREFIX at it;
# 3. runs, each with a time limit, a step's failure not stopping the next: the build (CUDA),
#    make test-gpu, make bench-gpu, scripts/gpu_offload_bench.sh, bench/torch_gpt2.py (bf16
#    sdpa, bf16 math), build/bench/zb_exec, scripts/gpu_offload_check.sh and
#    scripts/gpu_pipeline_check.sh; each step's output is tee'd into a log under $OUT;
# 4. prints a summary (step, result, seconds), also in $OUT/summary.txt.
# Environment: OUT (default /tmp/gpu-out), GPU_SESSION_BUDGET (seconds for everything, default
# 540), GPU_PREFIX (default /tmp/brigade-prefix), GPU_USE_PREFIX=auto|yes|no, CUDA (default 1
# when nvcc is found), GPU_STEPS (default "build test-gpu bench-gpu offload-bench torch-sdpa
# torch-math zb_exec offload pipeline"; also flash-ab, the fused attention's kernels against each
# other), ZB_ARGS (extra arguments for zb_exec), TORCH_ARGS (extra for torch_gpt2.py),
# OFFLOAD_BENCH_LIMIT (seconds for offload-bench, default 200; its own OFFLOAD_BENCH_* pass through).
# At most 8 files land in $OUT: env.log, 1-build.log, 2-test-gpu.log, 3-bench-gpu.log,
# 4-torch.log, 5-zb_exec.log, 6-offload.log (scripts/gpu_offload_bench.sh,
# scripts/gpu_offload_check.sh and scripts/gpu_pipeline_check.sh), summary.txt.
cd "$(dirname "$0")/.." || exit 1
OUT=${OUT:-/tmp/gpu-out}
mkdir -p "$OUT" || { echo "gpu_session: cannot create OUT=$OUT" >&2; exit 1; }
BUDGET=${GPU_SESSION_BUDGET:-540}
PFX=${GPU_PREFIX:-/tmp/brigade-prefix}
STEPS=${GPU_STEPS:-build test-gpu bench-gpu offload-bench torch-sdpa torch-math zb_exec offload pipeline}
T0=$(date +%s)
NPROC=$(nproc 2>/dev/null || echo 4)
ENVLOG="$OUT/env.log"
SUMMARY="$OUT/summary.txt"
: > "$SUMMARY"
# the environment before we change it: python3 (PyTorch) runs under it, not under the prefix
ORIG_LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}
ORIG_PATH=$PATH

elapsed() { echo $(($(date +%s) - T0)); }
say() { echo "gpu_session: $*" | tee -a "$ENVLOG"; }
have() { command -v "$1" >/dev/null 2>&1; }
# dpkg -x DEB DIR, or without dpkg its data member through ar and tar
unpack_deb() {
  if have dpkg; then dpkg -x "$1" "$2"; return; fi
  m=$(ar t "$1" | grep '^data\.tar') || return 1
  case $m in *.xz) z=-J;; *.zst) z=--zstd;; *.gz) z=-z;; *) z=;; esac
  ar p "$1" "$m" | tar -x $z -C "$2" -f -
}
deps_found() { have pkg-config && pkg-config --exists ompi-c libconfig criterion openblas 2>/dev/null; }

# ---------------------------------------------------------------- 1. what the machine has
{
  echo "==== machine ($(date -u +%Y-%m-%dT%H:%M:%SZ))"
  uname -a
  (. /etc/os-release 2>/dev/null && echo "os: $PRETTY_NAME")
  echo "glibc: $(ldd --version 2>/dev/null | head -1)"
  echo "cores: $NPROC; memory: $(free -g 2>/dev/null | awk '/^Mem:/{print $2 " GiB"}')"
  echo "---- nvidia-smi -L"; nvidia-smi -L 2>&1 || echo "(nvidia-smi failed or missing)"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv 2>/dev/null
  echo "---- nvcc"; if have nvcc; then nvcc --version | tail -2; elif [ -x /usr/local/cuda/bin/nvcc ]; then
    /usr/local/cuda/bin/nvcc --version | tail -2; echo "(nvcc not on PATH; /usr/local/cuda/bin/nvcc is there)"; else echo "no nvcc"; fi
  echo "---- tools"
  for t in gcc make pkg-config mpirun mpicc python3 timeout taskset dpkg; do
    printf '%-10s %s\n' "$t" "$(command -v $t || echo MISSING)"; done
  have gcc && gcc --version | head -1
  have mpirun && mpirun --version 2>&1 | head -1
  echo "---- libraries (pkg-config)"
  for m in ompi-c libconfig criterion openblas; do
    printf '%-10s %s\n' "$m" "$(pkg-config --modversion $m 2>/dev/null || echo 'not found')"; done
  echo "---- ldconfig"
  for l in libmpi.so.40 libconfig.so.9 libcriterion.so.3 libopenblas.so.0 libcudart.so libcublas.so libnccl.so; do
    printf '%-18s %s\n' "$l" "$(ldconfig -p 2>/dev/null | awk -v l="$l" '$1 ~ "^"l {print $NF; exit}')"; done
  echo "---- python3"
  python3 -c 'import torch, sys; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available())' 2>&1 | tail -1
} 2>&1 | tee "$ENVLOG"

# ---------------------------------------------------------------- 2. the private prefix
use=${GPU_USE_PREFIX:-auto}
if [ "$use" = auto ]; then
  if deps_found && have mpirun && have make; then use=no; else use=yes; fi
fi
if [ "$use" = yes ]; then
  if ! ls .gpu/debs/*.deb >/dev/null 2>&1; then
    say "ERROR: brigade's libraries or mpirun are missing here and .gpu/debs holds no .deb: run scripts/gpu_carry.sh before the call and carry [\".gpu\"]"
  elif ! have dpkg && ! have ar; then
    say "ERROR: neither dpkg nor ar here to unpack .gpu/debs"
  else
    P=$PFX
    L=$P/usr/lib/x86_64-linux-gnu
    gv=$(getconf GNU_LIBC_VERSION 2>/dev/null | awk '{print $2}')
    case $gv in 2.[0-9]|2.[0-2][0-9]|2.3[0-5]) say "WARNING: glibc $gv here; the carried Debian 12 binaries were built for glibc 2.36 and may not load";; esac
    say "unpacking $(ls .gpu/debs/*.deb | wc -l) .deb files into $P (dpkg -x; / is not touched)"
    rm -rf "$P" && mkdir -p "$P"
    for f in .gpu/debs/*.deb; do unpack_deb "$f" "$P" || say "ERROR: unpacking $f failed"; done
    # what dpkg's maintainer scripts (update-alternatives) would have linked
    for t in mpirun mpiexec mpicc mpicxx; do ln -sf "$t.openmpi" "$P/usr/bin/$t"; done
    for l in libopenblas.so.0 libopenblas.so libblas.so.3 liblapack.so.3; do
      [ -e "$L/openblas-pthread/$l" ] && ln -sf "openblas-pthread/$l" "$L/$l"; done
    # (libpsm-infinipath1's alternative; Open MPI's psm/ofi components load it)
    for f in "$P"/usr/lib/libpsm1/libpsm_infinipath.so.1.*; do
      [ -e "$f" ] && ln -sf "$f" "$L/libpsm_infinipath.so.1"; done
    mkdir -p "$L/pkgconfig"
    for pc in openblas blas-openblas lapack-openblas; do
      ln -sf "../openblas-pthread/pkgconfig/$pc.pc" "$L/pkgconfig/$pc.pc"; done
    # .pc files name /usr: point them at the prefix. Requires.private (criterion.pc: boxfort,
    # libffi, libgit2, nanomsg, whose -dev packages are not carried) only matters for static
    # linking, but pkg-config refuses --cflags without them: dropped
    find "$P" -name '*.pc' -type f -exec sed -i -e "s|^prefix=/usr\$|prefix=$P/usr|" \
      -e "s|=/usr/|=$P/usr/|g" -e "s|-I/usr/|-I$P/usr/|g" -e "s|-L/usr/|-L$P/usr/|g" \
      -e '/^Requires.private:/d' {} +
    # a carried library whose soname the system already has is set aside (the system's is used,
    # so that compilers and tools run here keep their own), except Open MPI's stack and
    # brigade's own libraries, which must be the carried ones
    mkdir -p "$P/set-aside"
    for f in "$L"/lib*.so.*; do
      [ -e "$f" ] || continue
      n=$(basename "$f")
      case "$n" in
        libmpi*|libopen-*|libompitrace*|liboshmem*|libmca_*|libpmix*|libhwloc*|libevent*|libconfig*|\
        libcriterion*|libopenblas*|libblas*|liblapack*|libgfortran*|libquadmath*|libnanomsg*|libgit2*|\
        libfabric*|libuc[mpst]*|libpsm*|libibverbs*|librdmacm*|libmunge*|libpkgconf*|libmbed*|libhttp_parser*) continue;;
      esac
      if ldconfig -p 2>/dev/null | grep -q "^[[:space:]]*$n "; then mv "$f" "$P/set-aside/"; fi
    done
    say "set aside (the system has them): $(ls "$P/set-aside" | tr '\n' ' ')"
    export PATH="$P/usr/bin:$PATH"
    export LD_LIBRARY_PATH="$L/openmpi/lib:$L:$L/openblas-pthread${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    export LIBRARY_PATH="$L/openmpi/lib:$L:$L/openblas-pthread${LIBRARY_PATH:+:$LIBRARY_PATH}"
    export CPATH="$P/usr/include:$P/usr/include/x86_64-linux-gnu:$L/openmpi/include${CPATH:+:$CPATH}"
    export PKG_CONFIG_PATH="$L/pkgconfig:$L/openmpi/lib/pkgconfig:$P/usr/share/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
    # Open MPI 4.1 relocated: OPAL_PREFIX moves every directory configured under ${prefix}
    # (libdir, pkglibdir with the MCA components, pkgdatadir with the help and wrapper files);
    # Debian's sysconfdir is /etc/openmpi, outside it, so it is named too
    export OPAL_PREFIX="$P/usr" OPAL_SYSCONFDIR="$P/etc/openmpi"
    # PMIx (Open MPI's launcher protocol) was configured with the absolute prefix
    # /usr/lib/x86_64-linux-gnu/pmix2; libpmix reads these variables instead (its plugins, its
    # help files)
    export PMIX_PREFIX="$L/pmix2" PMIX_EXEC_PREFIX="$L/pmix2" PMIX_PKGLIBDIR="$L/pmix2/lib/pmix" \
      PMIX_PKGDATADIR="$L/pmix2/share/pmix"
    export BRIGADE_DEPS=skip
    say "prefix ready: PATH, LD_LIBRARY_PATH, LIBRARY_PATH, CPATH, PKG_CONFIG_PATH, OPAL_PREFIX=$OPAL_PREFIX"
  fi
else
  say "brigade's libraries and mpirun are found here: no prefix"
fi
if [ ! -s data/kjv.txt ] && [ -s .gpu/kjv.txt.gz ]; then
  mkdir -p data && gzip -dc .gpu/kjv.txt.gz > data/kjv.txt && say "data/kjv.txt from .gpu/kjv.txt.gz"
fi

# CUDA: the Makefile links -L/usr/local/cuda/lib64 -lcudart -lnccl, and the backend loads cuBLAS
# and cuBLASLt when it starts (kernels/cuda/cublas_load.cu, by soname, plain name or from
# /usr/local/cuda/lib64); where a library has no .so link there or on the library path (NCCL
# often comes only with pip's nvidia-nccl), link the first one found into the prefix, which
# LD_LIBRARY_PATH then names
if [ -z "${CUDA:-}" ]; then
  if have nvcc || [ -x /usr/local/cuda/bin/nvcc ]; then CUDA=1; else CUDA=0; fi
fi
have nvcc || { [ -x /usr/local/cuda/bin/nvcc ] && export PATH="$PATH:/usr/local/cuda/bin"; }
if [ "$CUDA" = 1 ]; then
  CL=$PFX/cuda-links; mkdir -p "$CL"
  for l in cudart cublas cublasLt nccl; do
    found=""
    for d in /usr/local/cuda/lib64 $(echo "${LIBRARY_PATH:-}" | tr ':' ' '); do
      [ -e "$d/lib$l.so" ] && { found=$d/lib$l.so; break; }; done
    if [ -z "$found" ] && ldconfig -p 2>/dev/null | grep -q "^[[:space:]]*lib$l\.so "; then found=ldconfig; fi
    if [ -z "$found" ]; then
      cand=$(find /usr/local/cuda* /usr/lib/x86_64-linux-gnu /opt -name "lib$l.so.[0-9]*" 2>/dev/null | sort | head -1)
      if [ -n "$cand" ]; then
        ln -sf "$cand" "$CL/lib$l.so"; ln -sf "$cand" "$CL/$(basename "$cand" | sed 's/\(\.so\.[0-9]*\).*/\1/')"
        found="$cand (linked into $CL)"
      fi
    fi
    say "lib$l: ${found:-NOT FOUND (the CUDA build will not link)}"
  done
  export LIBRARY_PATH="${LIBRARY_PATH:+$LIBRARY_PATH:}$CL"
  export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$CL:/usr/local/cuda/lib64"
fi
export CUDA
{
  echo "---- after setup (CUDA=$CUDA)"
  for t in make pkg-config mpirun mpicc nvcc; do printf '%-10s %s\n' "$t" "$(command -v $t || echo MISSING)"; done
  have mpirun && mpirun --version 2>&1 | head -1
  for m in ompi-c libconfig criterion openblas; do
    printf '%-10s %s\n' "$m" "$(pkg-config --modversion $m 2>/dev/null || echo 'not found')"; done
  echo "setup took $(elapsed) s"
} 2>&1 | tee -a "$ENVLOG"

# ---------------------------------------------------------------- 3. the steps
RESULTS=""
# step NAME LOG LIMIT_S CMD...: runs CMD under timeout, output tee'd (appended) to $OUT/LOG
step() {
  name=$1 log=$OUT/$2 lim=$3; shift 3
  case " $STEPS " in *" $name "*) ;; *) return 0;; esac
  left=$((BUDGET - $(elapsed)))
  if [ "$left" -lt 15 ]; then
    echo "==== $name: SKIPPED, the session's budget ($BUDGET s) is spent" | tee -a "$log"
    RESULTS="$RESULTS$name SKIPPED(budget) 0
"; return 0
  fi
  [ "$lim" -gt "$left" ] && lim=$left
  echo "==== $name (limit $lim s, at $(elapsed) s): $*" | tee -a "$log"
  s=$(date +%s)
  rcf=$(mktemp)
  { timeout -k 10 "$lim" "$@" 2>&1; echo $? > "$rcf"; } | tee -a "$log"
  rc=$(cat "$rcf"); rm -f "$rcf"
  d=$(($(date +%s) - s))
  case $rc in
    0) r=PASS;; 124|137) r="FAIL(timeout)";; *) r="FAIL(rc=$rc)";;
  esac
  echo "==== $name: $r in $d s" | tee -a "$log"
  RESULTS="$RESULTS$name $r $d
"
}

GPU_BINS="build/brigade build/tests/gpu/test_ops_gpu build/tests/gpu/test_train_gpu build/bench/train_step build/bench/gemm_shapes build/bench/attention build/bench/zb_exec"
step build 1-build.log 240 make -j"$NPROC" CUDA="$CUDA" $GPU_BINS
step test-gpu 2-test-gpu.log 200 make CUDA="$CUDA" test-gpu
step bench-gpu 3-bench-gpu.log 180 make CUDA="$CUDA" bench-gpu
# the fused attention's kernels against each other (BRIGADE_CUDA_FLASH): their op tests on the
# GPU, bench/attention (each kind alone), then the default bf16 step with each, per-op times included
step flash-ab 3-bench-gpu.log 150 sh -c 'BRIGADE_TEST_BACKEND=cuda BRIGADE_REQUIRE_GPU=1 \
  build/tests/gpu/test_ops_gpu --filter "*/attention*"; build/bench/attention cuda; for k in mma wmma; do
  echo "== BRIGADE_CUDA_FLASH=$k"; BRIGADE_CUDA_FLASH=$k build/bench/train_step configs/gpt2-124m.cfg 8 1 cuda 16 1024 bf16; done'
# the Makefile's mpirun line (root, shared memory, the probed single-copy mechanism)
MPIRUN_CMD=$(make -s CUDA="$CUDA" --eval 'print-mpirun: ; @echo $(MPIRUN)' print-mpirun 2>/dev/null | tail -1)
[ -n "$MPIRUN_CMD" ] || MPIRUN_CMD="env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun"
step offload-bench 6-offload.log ${OFFLOAD_BENCH_LIMIT:-200} sh scripts/gpu_offload_bench.sh "$MPIRUN_CMD"
# PyTorch under the machine's own environment (not the prefix's libraries)
step torch-sdpa 4-torch.log 100 env PATH="$ORIG_PATH" LD_LIBRARY_PATH="$ORIG_LD_LIBRARY_PATH" PYTHONUNBUFFERED=1 \
  python3 bench/torch_gpt2.py --dtype bf16 --attention sdpa ${TORCH_ARGS:-}
step torch-math 4-torch.log 100 env PATH="$ORIG_PATH" LD_LIBRARY_PATH="$ORIG_LD_LIBRARY_PATH" PYTHONUNBUFFERED=1 \
  python3 bench/torch_gpt2.py --dtype bf16 --attention math ${TORCH_ARGS:-}
step zb_exec 5-zb_exec.log 150 build/bench/zb_exec --brigade build/brigade --mpirun "$MPIRUN_CMD" ${ZB_ARGS:-}
step offload 6-offload.log 90 sh scripts/gpu_offload_check.sh "$MPIRUN_CMD"
step pipeline 6-offload.log 120 sh scripts/gpu_pipeline_check.sh "$MPIRUN_CMD"

# ---------------------------------------------------------------- 4. summary
{
  gpu=$(nvidia-smi -L 2>/dev/null | head -1)
  echo "==== summary ($(hostname), ${gpu:-no GPU found}; total $(elapsed) s of $BUDGET)"
  printf '%s' "$RESULTS" | while read -r n r d; do [ -n "$n" ] && printf '%-12s %-16s %5s s\n' "$n" "$r" "$d"; done
  grep -h -E '^model |^mean:|^model FLOPs|^torch_gpt2: .*tokens/s|Synthesis|zb-h1 / 1f1b|ratio|^offload:|^pipeline:|^offload-bench:|mean step' "$OUT"/2-test-gpu.log "$OUT"/3-bench-gpu.log "$OUT"/4-torch.log "$OUT"/6-offload.log 2>/dev/null
} | tee "$SUMMARY"
case "$RESULTS" in *FAIL*|*SKIPPED*) exit 1;; esac
exit 0
