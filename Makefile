# brigade: pipeline-parallel trainer.
#   make            build build/brigade (installs missing Debian packages first)
#   make test       build and run every test
#   make test-gpu   the CUDA op table against the CPU's on this machine's GPU (fails without one)
#   make bench-gpu  GPT-2-124M-shaped training step on the GPU: tokens/s, MFU
#   make test-cuda-emu  the CUDA op table against the CPU's with no GPU: kernels/cuda on an emulator
#   make SANITIZE=1 test   the same under ASan + UBSan (objects go to build-san/)
#   make run        the main job (see README.md)
#   make pictures   make run, then its two timelines and two simulated ones into docs/img (the README's pictures)
#   make bench      benchmarks that print figures
#   make fuzz       libFuzzer targets (clang), FUZZ_SECONDS (60) each, FUZZ_JOBS (the cores) at once
#   make faults     the fault suite in full (tests/faults: FAULT_TRIALS (30) concurrent-writer trials), then tests/pipe/test_fault
#   CUDA=1 / CUDA=0 force the CUDA backend on / off (default: on when nvcc is found)

# ---- dependencies: checked (and installed) before anything is compiled ----
DEPS_PC := ompi-c libconfig criterion openblas
ifneq ($(MAKECMDGOALS),clean)
DEPS_OK := $(shell pkg-config --exists $(DEPS_PC) 2>/dev/null && echo yes)
ifneq ($(DEPS_OK),yes)
DEPS_RC := $(shell sh scripts/deps.sh 1>&2; echo $$?)
ifneq ($(DEPS_RC),0)
$(error could not install the Debian packages brigade needs: run scripts/deps.sh as root)
endif
endif
endif

CC      ?= cc
ifeq ($(CC),cc)
CC      := gcc
endif
SANITIZE ?= 0
BUILD   := build
ifeq ($(SANITIZE),1)
BUILD   := build-san
endif

PC_CFLAGS := $(shell pkg-config --cflags $(DEPS_PC))
PC_LIBS   := $(shell pkg-config --libs ompi-c libconfig openblas)
TEST_LIBS := $(shell pkg-config --libs criterion)

CFLAGS  := -std=c11 -D_GNU_SOURCE -O2 -g -Wall -Wextra -Werror -Wshadow -Wno-unused-parameter \
           -I. $(PC_CFLAGS) -MMD -MP
LDLIBS  := $(PC_LIBS) -lm -lpthread
# GCC's -fsanitize=undefined leaves out float-cast-overflow (a double outside an integer type's
# range converted to it, undefined behaviour); clang's, which `make fuzz` uses, has it.
ifeq ($(SANITIZE),1)
CFLAGS  += -O1 -fsanitize=address,undefined,float-cast-overflow -fno-omit-frame-pointer \
           -fno-sanitize-recover=undefined,float-cast-overflow
LDFLAGS += -fsanitize=address,undefined,float-cast-overflow
endif

# ---- CUDA: only when nvcc is found (or CUDA=1) ----
NVCC ?= $(shell command -v nvcc 2>/dev/null || (test -x /usr/local/cuda/bin/nvcc && echo /usr/local/cuda/bin/nvcc))
ifeq ($(CUDA),)
CUDA := $(if $(NVCC),1,0)
endif
CU_SRCS := $(wildcard kernels/cuda/*.cu)
ifeq ($(CUDA),1)
ifneq ($(CU_SRCS),)
CFLAGS  += -DBRIGADE_CUDA=1
NVFLAGS := -O2 -std=c++17 -I. -gencode arch=compute_90,code=sm_90 \
           -gencode arch=compute_80,code=[sm_80,compute_80] -Xcompiler -Wall,-Wextra,-Werror -DBRIGADE_CUDA=1 -MMD -MP
# cuBLAS and cuBLASLt are not linked: kernels/cuda/cublas_load.cu loads them on the CUDA
# backend's first call (linked, they cost every process 0.1 s and 90 MB before main)
LDLIBS  += -L/usr/local/cuda/lib64 -lcudart -lnccl -lstdc++ -ldl
endif
endif

# ---- the library: every .c of the folders below ----
LIB_DIRS := core kernels kernels/cpu layers schedule pipe zero viz
LIB_SRCS := $(foreach d,$(LIB_DIRS),$(wildcard $(d)/*.c))
LIB_OBJS := $(LIB_SRCS:%.c=$(BUILD)/%.o)
ifeq ($(CUDA),1)
LIB_OBJS += $(CU_SRCS:%.cu=$(BUILD)/%.cu.o)
endif
LIB      := $(BUILD)/libbrigade.a

CLI_SRCS := $(wildcard cli/*.c)
CLI_OBJS := $(CLI_SRCS:%.c=$(BUILD)/%.o)
BIN      := $(BUILD)/brigade

# ---- tests: tests/<area>/test_*.c, one Criterion binary each; tests/<area>/worker_*.c plain programs ----
TEST_SRCS := $(wildcard tests/*/test_*.c)
TEST_BINS := $(patsubst tests/%.c,$(BUILD)/tests/%,$(TEST_SRCS))
WORKER_SRCS := $(wildcard tests/*/worker_*.c)
WORKER_BINS := $(patsubst tests/%.c,$(BUILD)/tests/%,$(WORKER_SRCS))
TEST_HELPER_SRCS := $(wildcard tests/common/*.c)
TEST_HELPER_OBJS := $(TEST_HELPER_SRCS:%.c=$(BUILD)/%.o)

BENCH_SRCS := $(wildcard bench/*.c)
BENCH_BINS := $(patsubst bench/%.c,$(BUILD)/bench/%,$(BENCH_SRCS))

.PHONY: pictures all test test-gpu test-cuda-emu bench-gpu run bench clean deps format fuzz faults FORCE
.SECONDARY:
all: $(BIN)

deps:
	sh scripts/deps.sh

# Objects depend on the flags they were built with (CUDA on or off, sanitizers), so changing
# them rebuilds everything.
FLAGS_STAMP := $(BUILD)/.flags
$(FLAGS_STAMP): FORCE
	@mkdir -p $(BUILD)
	@echo '$(CC) $(CFLAGS) $(NVFLAGS)' | cmp -s - $@ || echo '$(CC) $(CFLAGS) $(NVFLAGS)' > $@
FORCE:

# The CPU kernels' element-wise loops vectorise with GCC's cheap cost model (-O2 uses the very
# cheap one, which leaves loops needing an epilogue or an alias check scalar) and without errno
# for sqrtf. Neither changes a result: no reassociation, each element's arithmetic as written.
$(BUILD)/kernels/cpu/ops_cpu.o $(BUILD)/kernels/cpu/vec_sse.o $(BUILD)/kernels/cpu/vec_avx2.o $(BUILD)/kernels/cpu/vec_avx512.o: \
  CFLAGS += -fno-math-errno -fvect-cost-model=cheap
# The 16-lane loops keep to zmm0-15: VZEROUPPER does not clean zmm16-31, and left dirty they
# slowed the non-VEX SSE code that ran after them (the step's softmax took about 2.5x as long).
$(BUILD)/kernels/cpu/vec_avx512.o: CFLAGS += $(foreach r,16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31,-ffixed-xmm$(r))

$(BUILD)/%.o: %.c $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

$(BUILD)/%.cu.o: %.cu $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVFLAGS) -c $< -o $@

$(LIB): $(LIB_OBJS)
	@mkdir -p $(dir $@)
	rm -f $@
	ar rcs $@ $^

$(BIN): $(CLI_OBJS) $(LIB)
	$(CC) $(LDFLAGS) $(CLI_OBJS) $(LIB) $(LDLIBS) -o $@

# Criterion is linked into test binaries only: a program linked with it aborts when started
# from inside a Criterion test (it takes itself for a sandboxed child).
$(TEST_BINS): $(BUILD)/tests/%: $(BUILD)/tests/%.o $(TEST_HELPER_OBJS) $(LIB)
	$(CC) $(LDFLAGS) $< $(TEST_HELPER_OBJS) $(LIB) $(LDLIBS) $(TEST_LIBS) -o $@

$(WORKER_BINS): $(BUILD)/tests/%: $(BUILD)/tests/%.o $(TEST_HELPER_OBJS) $(LIB)
	$(CC) $(LDFLAGS) $< $(TEST_HELPER_OBJS) $(LIB) $(LDLIBS) -o $@

$(BUILD)/bench/%: $(BUILD)/bench/%.o $(LIB)
	$(CC) $(LDFLAGS) $< $(LIB) $(LDLIBS) -o $@

# Runs every test binary; each prints Criterion's synthesis line. Fails if any fails.
# Then the CUDA backend on the emulator (tests/emu, below), and the README's commands, run as
# written (scripts/readme_commands.sh; its mpirun lines get the MPIRUN below).
test: $(BIN) $(TEST_BINS) $(WORKER_BINS) $(BUILD)/emu/test_ops_emu $(BUILD)/emu/test_emu_streams $(BUILD)/emu/test_emu_ptx $(BUILD)/emu/brigade data/kjv.txt
	@OMPI_MCA_btl_vader_single_copy_mechanism=$(MPI_SINGLE_COPY) BRIGADE_BIN=$(abspath $(BIN)) \
	  BRIGADE_BUILD=$(abspath $(BUILD)) BRIGADE_MPIRUN='$(MPIRUN)' \
	  sh scripts/run_tests.sh $(TEST_BINS) $(BUILD)/emu/test_emu_streams $(BUILD)/emu/test_emu_ptx tests/emu/test_ops_emu.sh scripts/readme_commands.sh

# The fault suite in full: every case of tests/faults/test_faults.c (`make test` runs the fast ones
# and 3 trials of two runs into one checkpoint directory; here FAULT_TRIALS of them and the
# multi-rank refusal), then the older fault tests (a killed rank, a stuck rank, a signal, a damaged
# checkpoint). `make SANITIZE=1 faults`: the same under ASan + UBSan.
FAULT_TRIALS ?= 30
faults: $(BIN) $(BUILD)/tests/faults/test_faults $(BUILD)/tests/pipe/test_fault data/kjv.txt
	@OMPI_MCA_btl_vader_single_copy_mechanism=$(MPI_SINGLE_COPY) BRIGADE_BIN=$(abspath $(BIN)) \
	  BRIGADE_BUILD=$(abspath $(BUILD)) BRIGADE_FAULTS=all BRIGADE_FAULT_TRIALS=$(FAULT_TRIALS) \
	  sh scripts/run_tests.sh $(BUILD)/tests/faults/test_faults $(BUILD)/tests/pipe/test_fault

# The CUDA op table against the CPU one on this machine's GPU (tests/gpu), NCCL's entries, and
# the tiny GPT trained on it. `make test` runs the same binaries, which skip when there is no
# GPU; here no GPU (or no CUDA build) is a failure. Every suite runs even when one fails (a lent
# GPU's minutes are few).
# (`make test` also runs the same harness against the "fakedev" table: test_ops_fakedev.)
GPU_TEST := $(BUILD)/tests/gpu/test_ops_gpu
GPU_TRAIN_TEST := $(BUILD)/tests/gpu/test_train_gpu
GPU_COLL_TEST := $(BUILD)/tests/gpu/test_coll_gpu
test-gpu: $(GPU_TEST) $(GPU_TRAIN_TEST) $(GPU_COLL_TEST) $(BIN) data/kjv.txt
ifneq ($(CUDA),1)
	@echo "make test-gpu: this build has no CUDA backend (CUDA=0, or no nvcc found); nothing to test" >&2; exit 1
else
	@rc=0; \
	BRIGADE_TEST_BACKEND=cuda BRIGADE_REQUIRE_GPU=1 $(GPU_TEST) --jobs 2 || rc=1; \
	BRIGADE_REQUIRE_GPU=1 $(GPU_COLL_TEST) || rc=1; \
	OMPI_MCA_btl_vader_single_copy_mechanism=$(MPI_SINGLE_COPY) BRIGADE_BIN=$(abspath $(BIN)) \
	  BRIGADE_BUILD=$(abspath $(BUILD)) BRIGADE_REQUIRE_GPU=1 $(GPU_TRAIN_TEST) || rc=1; \
	[ $$rc = 0 ] || echo "make test-gpu: some GPU tests failed (every suite ran; see above)" >&2; exit $$rc
endif

# The GPU benchmark: a single-rank GPT-2-124M-shaped training step filling the GPU (B=16,
# T=1024): tokens/s, MFU against BRIGADE_PEAK_TFLOPS (default the H100 SXM's dense bf16), the
# GEMM share of the step; bf16 mixed precision as training runs it (the operands' bf16 copies,
# cuBLASLt's fused bias and residual, the fused attention), then with the per-head GEMM
# attention (BRIGADE_CUDA_ATTENTION=gemm), then with cuBLAS rounding the fp32 operands itself
# (BRIGADE_CUDA_HALF=fast), then with the plain linear layers (BRIGADE_CUDA_LINEAR=plain), then
# fp16 both ways, then fp32; then the GEMM rates of the MLP's and the LM head's products
# (bench/gemm_shapes.c: the vocabulary as it is, padded to 50304, and in padded logits rows as
# the model runs it) in both bf16 modes; then the attention op alone (bench/attention.c: each
# fused kernel set, then the per-head GEMMs).
bench-gpu: $(BUILD)/bench/train_step $(BUILD)/bench/gemm_shapes $(BUILD)/bench/attention
	$(BUILD)/bench/train_step configs/gpt2-124m.cfg 10 1 cuda 16 1024 bf16
	BRIGADE_CUDA_ATTENTION=gemm $(BUILD)/bench/train_step configs/gpt2-124m.cfg 10 1 cuda 16 1024 bf16
	$(BUILD)/bench/train_step configs/gpt2-124m.cfg 10 1 cuda 16 1024 bf16fast
	BRIGADE_CUDA_LINEAR=plain $(BUILD)/bench/train_step configs/gpt2-124m.cfg 10 1 cuda 16 1024 bf16
	$(BUILD)/bench/train_step configs/gpt2-124m.cfg 5 1 cuda 16 1024 fp16
	$(BUILD)/bench/train_step configs/gpt2-124m.cfg 5 1 cuda 16 1024 fp16fast
	$(BUILD)/bench/train_step configs/gpt2-124m.cfg 3 1 cuda 16 1024 fp32
	$(BUILD)/bench/gemm_shapes cuda bf16
	$(BUILD)/bench/gemm_shapes cuda bf16fast
	$(BUILD)/bench/attention cuda
	BRIGADE_CUDA_ATTENTION=gemm $(BUILD)/bench/attention cuda

# The CUDA backend without a GPU: tests/emu compiles kernels/cuda/*.cu as host C++ against an
# emulated CUDA runtime, cuBLAS (column-major, argument checks), WMMA, CUB and NCCL (over MPI),
# under ASan, and runs the GPU op harness (tests/gpu/test_ops_gpu.c) against it, with the
# threads of each block run in order and then in reverse (a missing barrier fails one of them).
# `make test` runs it too (tests/emu/test_ops_emu.sh, both orders, about 80 s); see
# tests/emu/emu.cpp for what it does not model. $(EMU)/brigade is the CLI on the emulated
# backend (backend = "cuda"): tests/emu/test_train_emu.c trains a small GPT on it against the CPU.
EMU      := $(BUILD)/emu
EMU_CU   := attention_cuda backend blas_cuda coll_cuda flash_cuda flash_mma ops_cuda
EMU_HDRS := $(wildcard tests/emu/include/*.h tests/emu/include/cub/device/*.cuh)
EMU_CXX  := g++ -std=c++17 -O1 -g -fsanitize=address -fno-omit-frame-pointer -Itests/emu/include -I. \
            -DBRIGADE_CUDA=1 -MMD -MP
EMU_OBJS := $(EMU_CU:%=$(EMU)/%.o) $(EMU)/emu.o $(EMU)/nccl_emu.o $(EMU)/ops.o \
            $(filter-out %.cu.o $(BUILD)/kernels/ops.o,$(LIB_OBJS))
EMU_LIBS := $(PC_LIBS) -lm -lpthread

$(EMU)/%.cpp: kernels/cuda/%.cu tests/emu/prep.sed
	@mkdir -p $(EMU)
	{ echo '#line 1 "$<"'; sed -E -f tests/emu/prep.sed $<; } > $@
$(EMU)/%.o: $(EMU)/%.cpp $(EMU_HDRS) kernels/cuda/cuda.h kernels/cuda/reduce.cuh kernels/cuda/ptx.cuh
	$(EMU_CXX) -w -c $< -o $@
$(EMU)/emu.o: tests/emu/emu.cpp $(EMU_HDRS)
	@mkdir -p $(EMU)
	$(EMU_CXX) -Wall -Wextra -c $< -o $@
$(EMU)/nccl_emu.o: tests/emu/nccl_emu.cpp $(EMU_HDRS)
	@mkdir -p $(EMU)
	$(EMU_CXX) $(PC_CFLAGS) -Wall -Wextra -Werror -c $< -o $@
$(EMU)/ops.o: kernels/ops.c $(FLAGS_STAMP) # with the CUDA table, whatever this build has
	@mkdir -p $(EMU)
	$(CC) $(filter-out -DBRIGADE_CUDA=1,$(CFLAGS)) -DBRIGADE_CUDA=1 -c $< -o $@
$(EMU)/test_emu_streams: tests/emu/test_emu_streams.cpp $(EMU)/emu.o $(EMU_HDRS)
	$(EMU_CXX) -Wall -Wextra -Werror $< $(EMU)/emu.o $(TEST_LIBS) -lpthread -o $@
$(EMU)/test_emu_ptx: tests/emu/test_emu_ptx.cpp $(EMU)/emu.o $(EMU_HDRS) kernels/cuda/ptx.cuh
	$(EMU_CXX) -Wall -Wextra -Werror $< $(EMU)/emu.o $(TEST_LIBS) -lpthread -o $@
$(EMU)/test_ops_emu: $(BUILD)/tests/gpu/test_ops_gpu.o $(TEST_HELPER_OBJS) $(EMU_OBJS)
	g++ -fsanitize=address $(LDFLAGS) $^ $(EMU_LIBS) $(TEST_LIBS) -o $@
$(EMU)/brigade: $(CLI_OBJS) $(EMU_OBJS)
	g++ -fsanitize=address $(LDFLAGS) $^ $(EMU_LIBS) -o $@

test-cuda-emu: $(EMU)/test_ops_emu
	@for o in fwd rev; do echo "make test-cuda-emu: threads of a block in $$o order"; \
	  EMU_ORDER=$$o BRIGADE_TEST_BACKEND=cuda BRIGADE_REQUIRE_GPU=1 ASAN_OPTIONS=detect_leaks=0 \
	  $(EMU)/test_ops_emu --jobs 2 || exit 1; done

# mpirun for small shared machines: as root, more ranks than cores, yielding when idle, and
# shared memory moving large messages by cross-memory attach where the machine allows it
# (scripts/mpi_single_copy.sh probes once; without it a pipeline's transfers wait for the
# sender's next MPI call, which measured twice the step time here).
MPI_SINGLE_COPY = $(shell sh scripts/mpi_single_copy.sh $(BUILD))
MPIRUN = env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
  OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_mpi_yield_when_idle=1 OMPI_MCA_btl=self,vader \
  OMPI_MCA_btl_vader_single_copy_mechanism=$(MPI_SINGLE_COPY) MALLOC_MMAP_THRESHOLD_=2147483647 \
  MALLOC_TRIM_THRESHOLD_=4294967295 mpirun

# The default corpus (King James Bible, from Debian's bible-kjv).
data/kjv.txt:
	sh scripts/data.sh $@

# The main job: train configs/default.cfg across 4 pipeline stages on the CPU; writes
# out/checkpoint/ and the measured bubble timeline out/trace.json (+ .svg), and the simulator's
# prediction of the same run (costs from the config's FLOPs) next to it.
run: $(BIN) data/kjv.txt
	@mkdir -p out
	@echo "make run: training configs/default.cfg (a 0.83M-parameter GPT on data/kjv.txt) across 4 pipeline"
	@echo "          stages, 300 steps: about a minute on a 2-core machine; progress every 25 steps"
	$(MPIRUN) -np 4 $(BIN) train configs/default.cfg --log-json out/train.jsonl
	$(BIN) sample --checkpoint out/checkpoint --prompt "And God said" --tokens 200
	$(BIN) sim configs/default.cfg --steps 1 --svg out/simulated.svg --trace out/simulated.json
	@echo "make run: done. out/checkpoint/ (steps 100, 200, 300; 'latest' names the last),"
	@echo "          out/trace.json.svg (the measured timeline of step 5; out/trace.json for Perfetto),"
	@echo "          out/simulated.svg (the simulator's prediction of the same step), out/train.jsonl"

# The README's pictures (docs/img/): the default run's measured and simulated timelines, and the
# simulated step boundary (post-validation) and offload pictures.
pictures: run
	@mkdir -p docs/img
	cp out/trace.json.svg docs/img/measured.svg
	cp out/simulated.svg docs/img/simulated.svg
	$(BIN) sim --schedule zb-h2 --stages 4 --microbatches 8 --cost-step 0.5 --steps 3 --step-sync post-validation --svg docs/img/post_validation.svg
	$(BIN) sim --schedule 1f1b --stages 4 --microbatches 8 --cost-offload 0.5 --offload full --svg docs/img/offload.svg

# ---- fuzzing: libFuzzer targets tests/fuzz/fuzz_*.c, built with clang (not by `make test`) ----
# `make fuzz` runs each for FUZZ_SECONDS on its seeds (tests/malformed, configs) and fails on
# any crash, leak or sanitizer report.
FUZZ_CC      ?= clang
FUZZ_SECONDS ?= 60
FUZZ_BUILD   := build-fuzz
FUZZ_CFLAGS  := -std=c11 -D_GNU_SOURCE -O1 -g -Wall -Wextra -Werror -Wno-unused-parameter -I. \
                $(PC_CFLAGS) -fsanitize=fuzzer-no-link,address,undefined \
                -fno-sanitize-recover=undefined -fno-omit-frame-pointer -MMD -MP
FUZZ_SRCS    := $(wildcard tests/fuzz/fuzz_*.c)
FUZZ_BINS    := $(patsubst tests/fuzz/%.c,$(FUZZ_BUILD)/%,$(FUZZ_SRCS))
FUZZ_OBJS    := $(LIB_SRCS:%.c=$(FUZZ_BUILD)/%.o)

$(FUZZ_BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -c $< -o $@

$(FUZZ_BUILD)/libbrigade.a: $(FUZZ_OBJS)
	rm -f $@
	ar rcs $@ $^

$(FUZZ_BUILD)/fuzz_%: $(FUZZ_BUILD)/tests/fuzz/fuzz_%.o $(FUZZ_BUILD)/libbrigade.a
	$(FUZZ_CC) -fsanitize=fuzzer,address,undefined $< $(FUZZ_BUILD)/libbrigade.a $(PC_LIBS) -lm -lpthread -o $@

fuzz: $(FUZZ_BINS)
	sh scripts/fuzz.sh $(FUZZ_SECONDS) $(FUZZ_BINS)

bench: $(BENCH_BINS) $(BIN) data/kjv.txt
	@for b in $(filter-out %/mpi_collectives %/zb_exec %/zero_memory,$(BENCH_BINS)); do echo "== $$b"; $$b || exit 1; done
	@echo "== $(BUILD)/bench/train_step configs/gpt2-124m.cfg 3 2 cpu 4 64 bf16 (the CPU's bf16 GEMM where it has AVX512-BF16, on AMX where it has that, else fp32 GEMMs)"
	@$(BUILD)/bench/train_step configs/gpt2-124m.cfg 3 2 cpu 4 64 bf16
	@echo "== $(BUILD)/bench/mpi_collectives (mpirun -np 4)"
	@$(MPIRUN) -np 4 $(BUILD)/bench/mpi_collectives
	@echo "== $(BUILD)/bench/zb_exec (brigade train under mpirun, per schedule)"
	@$(BUILD)/bench/zb_exec --brigade $(BIN) --mpirun '$(MPIRUN)'
	@echo "== $(BUILD)/bench/zero_memory (ZeRO stages 0-3 under mpirun)"
	@$(BUILD)/bench/zero_memory --brigade $(BIN) --mpirun '$(MPIRUN)'
	@echo "== bench/cpu_peers.sh (GPT-2-124M's shape: brigade fp32 and bf16 against each other and PyTorch, interleaved)"
	@BUILD=$(BUILD) sh bench/cpu_peers.sh
	@echo "== bench/zb_paper.sh (simulated bubbles at the zero-bubble paper's 12 measured set-ups, the paper's beside)"
	@BUILD=$(BUILD) sh bench/zb_paper.sh

format:
	clang-format -i $$(git ls-files '*.c' '*.h' '*.cu')

clean:
	rm -rf build build-san build-fuzz out

-include $(FUZZ_OBJS:.o=.d) $(FUZZ_SRCS:%.c=$(FUZZ_BUILD)/%.d) $(LIB_OBJS:.o=.d) $(CLI_OBJS:.o=.d) $(TEST_BINS:=.d) $(WORKER_BINS:=.d) \
  $(TEST_HELPER_OBJS:.o=.d) $(BENCH_BINS:=.d) $(EMU_CU:%=$(EMU)/%.d) $(EMU)/emu.d $(EMU)/ops.d
