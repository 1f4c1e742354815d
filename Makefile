# shoal - one entry point: build, deps, test, demo.
#
#   make            build bin/shoal-server, bin/shoal-agent, bin/shoal-sched, bin/shoal-relay (release: -O2 -g)
#   make SAN=1      build with AddressSanitizer + UBSan into build/san/bin/
#   make deps       install the Debian and npm packages the project needs (idempotent)
#   make test       deps, then unit and integration tests under sanitizers
#   make test-deploy  the images built and the compose stack run: two agent containers train a
#                     job kept across down and up (.ci/run runs it after make test)
#   make demo       deps, build, a server and four CPU agents train a small GPT, then sample it
#   make bench-sched  the scheduler against the paper's results and generated networks' best
#                     known costs (table + JSON lines); bench-sched-long refreshes those (hours)
#   make fuzz         libFuzzer on every parser of untrusted input, FUZZ_SECONDS each (clang)
#   make test-gpu     CUDA kernels against the CPU oracle (needs a GPU)
#   make bench-kernels  stage forward+backward speed, MFU, side by side with PyTorch where
#                       python3-torch is installed (GPU; BENCH_ARGS="--device cpu" on the CPU)
#   make bench-gpu-pipeline  two CUDA agents train a GPT-2-124M-sized job as 2 stages on one GPU
#                     per stage-link type: step time and tokens/s beside the kernels-only time
#   make bench-peer   peer frames vs plain TCP, ring all-reduce, a 2x2 step's time split
#   make bench-relay  a sealed job connection direct and through shoal-relay: throughput, relay CPU
#   make bench-load   simulated agents in steps (heartbeats, long-polls, progress) + wrk: latency, knee
#   make testbed      hosts in network namespaces on shaped links: measured links and four
#                     plans' predicted vs measured iteration times (needs root)
#   make bench-wan    one job on two sites over a slow link under every stage-link and sync
#                     mode: bytes, step time, validation loss, time to the baseline's (root)
#   make bench-faults a 2x2 job under kill -9 of agents, server, postmaster and relay, a stalled
#                     agent, a failing store, an agent's full disk and a frozen database,
#                     victims and steps from a printed seed: recovery times, steps
#                     trained again, losses against the uninterrupted run
#   make bench-finetune GPT-2 124M imported and fine-tuned across four agents beside the same
#                     job from scratch: import, step and export times (GPT2_BIN, GPT2_DATA;
#                     FAMILY=llama: SmolLM2-135M, LLAMA_DIR its files; SHAPE=llama-3.2-1b:
#                     a Llama-3.2-1B-shaped file in, out, in and out again, untrained)
#   make bench-tokenize shoal's BPE encoder (tokenize, 1 and 2 threads) beside npm's tiktoken on the
#                     same text, GPT-2 and Llama 3 vocabularies: MB/s (TOKENIZE_MB, 24)
#   make CUDA=0       build without the CUDA backend even where nvcc exists
#   make clean

CC      ?= cc
MODE    := $(if $(SAN),san,rel)
BUILD   := build/$(MODE)
BINDIR  := $(if $(SAN),$(BUILD)/bin,bin)

CFLAGS  := -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -O2 -g -pthread \
           -I/usr/include/postgresql -MMD -MP
LDLIBS  := -lmicrohttpd -ljansson -lpq -lcrypto -lpcre2-8 -lutf8proc -lm -pthread
ifdef SAN
CFLAGS  += -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
LDFLAGS += -fsanitize=address,undefined
endif

# The CUDA backend is built where nvcc is; sanitizer builds leave it out
# (ASan and the CUDA runtime do not share an address space well).
NVCC    ?= /usr/local/cuda/bin/nvcc
CUDA_HOME ?= /usr/local/cuda
CUDA    ?= $(if $(SAN),0,$(if $(wildcard $(NVCC)),1,0))
CUDA_ARCH ?= sm_90
NVCCFLAGS := -std=c++17 -O3 -g -arch=$(CUDA_ARCH) -Xcompiler=-Wall,-Wextra,-Werror,-fopenmp \
             -Wno-deprecated-gpu-targets

KERNELS_CFLAGS := -fopenmp -I/usr/include/x86_64-linux-gnu/openblas-openmp
KERNELS_LIBS   := -lopenblas -fopenmp -lm
KERNELS_SRC := kernels/stage.c kernels/layout.c \
               kernels/cpu_layers.c kernels/cpu_stage.c kernels/cpu_gpt2.c kernels/cpu_llama.c
# The model families' description and the stage links' wire formats
# (common/model.c, common/codec.c, libc only) are the pieces of common/ the
# kernels read.
KERNELS_OBJ := $(KERNELS_SRC:%.c=$(BUILD)/%.o) $(BUILD)/common/model.o $(BUILD)/common/codec.o
ifeq ($(CUDA),1)
KERNELS_OBJ += $(patsubst %.cu,$(BUILD)/%.o,$(wildcard kernels/cuda_*.cu))
KERNELS_LIBS += -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcublas -lcublasLt \
                -lnccl -lcudart -lstdc++
AGENT_NCCL  := agent/net/nccl.c
else
KERNELS_OBJ += $(BUILD)/kernels/cuda_none.o
AGENT_NCCL  := agent/net/nccl_none.c
endif
# The model files (models/README.md): stage files, llm.c's and Hugging
# Face's formats, over the kernels; their JSON through jansson.  A program
# that links them links MODELS_OBJ, KERNELS_OBJ and MODELS_LIBS.
MODELS_SRC  := $(wildcard models/*.c)
MODELS_OBJ  := $(MODELS_SRC:%.c=$(BUILD)/%.o)
MODELS_LIBS := -ljansson

COMMON_SRC  := $(wildcard common/*.c)
# The server's wings (server/README.md), bottom to top; main.c and
# shoal_sched.c are the two programs.
SERVER_WINGS := base store http jobs api
SERVER_SRC  := $(foreach w,$(SERVER_WINGS),$(wildcard server/$(w)/*.c))
# The agent's rooms (agent/README.md); the data-parallel all-reduce over
# NCCL where CUDA is built, else its stub.
AGENT_ROOMS := control net train tools
AGENT_SRC   := $(filter-out agent/main.c agent/net/nccl.c agent/net/nccl_none.c, \
                 $(wildcard agent/*.c) $(foreach r,$(AGENT_ROOMS),$(wildcard agent/$(r)/*.c))) $(AGENT_NCCL)
SCHED_SRC   := $(wildcard server/sched/*.c)
UNIT_SRC    := $(wildcard tests/unit/test_*.c)
MIGRATIONS  := $(sort $(wildcard sql/*.sql))
# The dashboard's files are served by name (server/api/h_web.c).
WEB         := web/index.html web/app.js web/app.css web/favicon.svg
STATIC      := server/openapi.yaml $(WEB)

COMMON_OBJ  := $(COMMON_SRC:%.c=$(BUILD)/%.o)
AGENT_OBJ   := $(AGENT_SRC:%.c=$(BUILD)/%.o)
SCHED_OBJ   := $(SCHED_SRC:%.c=$(BUILD)/%.o)
SERVER_OBJ  := $(SERVER_SRC:%.c=$(BUILD)/%.o) $(BUILD)/gen/embedded.o $(SCHED_OBJ)
# The server checks each uploaded stage file's header (models/stage_file.c needs only libc
# and common/model.c).
SERVER_OBJ  += $(BUILD)/models/stage_file.o
UNIT_BIN    := $(UNIT_SRC:tests/unit/%.c=$(BUILD)/tests/%)
RELAY_OBJ   := $(BUILD)/relay/relay.o $(BUILD)/relay/relay_books.o

DEB_PACKAGES := build-essential pkg-config libmicrohttpd-dev libjansson-dev \
                libcurl4-openssl-dev libpq-dev libssl-dev libcmocka-dev \
                postgresql curl jq procps bc libopenblas-openmp-dev nodejs chromium \
                fortunes docker-compose clang libclang-rt-dev wrk openssl \
                prometheus python3 libpcre2-dev libutf8proc-dev nftables
# python3: test_examples.sh extracts and compares the documents' examples.
# nftables: test_nat.sh's hosts behind NAT (a stateful firewall in each).
# prometheus: for promtool (the tests lint /metrics, prometheus.yml and the
# Grafana dashboard's queries); deploy/deps.sh keeps its daemon stopped.

# Installed only when the command is missing (NodeSource's nodejs has its own npm;
# an engine from Docker's own packages serves make test-deploy as well as
# Debian's docker.io): COMMAND or COMMAND=PACKAGE.
# debootstrap: make test-deploy's base image, from Debian's archive.
DEB_COMMANDS := npm dockerd=docker.io debootstrap
# From each package-lock.json: the browser test's playwright-core; the
# OpenAPI lint (Redocly) and response validator (ajv) of tests/api; the
# tokenizer oracles of tests/tokenize (tiktoken, @huggingface/tokenizers).
NPM_DIRS     := tests/browser tests/api tests/tokenize

.PHONY: all deps test test-deploy test-gpu demo bench-sched bench-sched-long bench-kernels bench-gpu-pipeline bench-peer bench-relay bench-load bench-wan bench-faults bench-finetune bench-tokenize testbed fuzz clean
all: $(BINDIR)/shoal-server $(BINDIR)/shoal-sched $(BINDIR)/shoal-agent $(BINDIR)/shoal-relay

$(BINDIR)/shoal-server: $(BUILD)/server/main.o $(SERVER_OBJ) $(COMMON_OBJ)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BINDIR)/shoal-agent: $(BUILD)/agent/main.o $(AGENT_OBJ) $(COMMON_OBJ) $(MODELS_OBJ) $(KERNELS_OBJ)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS) -lcurl $(KERNELS_LIBS)

# shoal-relay (relay/README.md): common/ and libc only.
$(BINDIR)/shoal-relay: $(BUILD)/relay/main.o $(RELAY_OBJ) $(COMMON_OBJ)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BINDIR)/shoal-sched: $(BUILD)/server/shoal_sched.o $(BUILD)/server/jobs/jobspec.o $(SCHED_OBJ) $(COMMON_OBJ)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/%.o: %.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -c -o $@ $<

$(BUILD)/kernels/%.o: CFLAGS += $(KERNELS_CFLAGS)
# FP operations never trap here (no FP exceptions are enabled), which lets
# GELU's and the softmaxes' loops vectorise (kernels/cpu_tanh.h, cpu_exp.h); values are unchanged.
$(BUILD)/kernels/cpu_layers.o: CFLAGS += -fno-trapping-math
$(BUILD)/agent/net/nccl.o: CFLAGS += -I$(CUDA_HOME)/include

$(BUILD)/kernels/%.o: kernels/%.cu $(wildcard kernels/*.h kernels/*.cuh)
	@mkdir -p $(@D)
	$(NVCC) $(NVCCFLAGS) -c -o $@ $<

# Migrations and static documents are compiled into the server.
$(BUILD)/gen/embedded.c: server/store/embed.sh $(MIGRATIONS) $(STATIC)
	@mkdir -p $(@D)
	sh server/store/embed.sh embedded_migrations $(MIGRATIONS) -- embedded_static $(STATIC) > $@.tmp
	mv $@.tmp $@

$(BUILD)/gen/embedded.o: $(BUILD)/gen/embedded.c
	$(CC) $(CFLAGS) -Iserver/store -c -o $@ $<

$(BUILD)/tests/%: tests/unit/%.c $(SERVER_OBJ) $(AGENT_OBJ) $(RELAY_OBJ) $(COMMON_OBJ) $(MODELS_OBJ) $(KERNELS_OBJ)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $(filter %.c %.o,$^) $(LDLIBS) -lcurl $(KERNELS_LIBS) -lcmocka

# Kernel tools: the GPU test and the benchmark, linked with the CUDA backend
# where it is built.  The GPU test saves and loads stage files (models/).
KERNEL_TOOLS := $(BUILD)/tests/gpu/test_kernels_gpu $(BUILD)/bench/bench_kernels $(BUILD)/bench/bench_pipeline

$(BUILD)/tests/gpu/test_kernels_gpu: $(wildcard tests/gpu/*.c) $(MODELS_OBJ) $(KERNELS_OBJ)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $(filter %.c %.o,$^) $(MODELS_LIBS) $(KERNELS_LIBS)

$(BUILD)/bench/bench_peer: tests/bench/bench_peer.c $(filter $(BUILD)/agent/net/peer% $(BUILD)/agent/net/ring.o,$(AGENT_OBJ)) $(COMMON_OBJ)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $(filter %.c %.o,$^) $(LDLIBS)

$(BUILD)/bench/bench_relay: tests/bench/bench_relay.c $(filter $(BUILD)/agent/net/peer%,$(AGENT_OBJ)) $(COMMON_OBJ)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $(filter %.c %.o,$^) $(LDLIBS)

$(BUILD)/bench/bench_kernels: tests/bench/bench_kernels.c $(KERNELS_OBJ)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $(filter %.c %.o,$^) $(KERNELS_LIBS)

$(BUILD)/bench/bench_pipeline: tests/bench/bench_pipeline.c $(KERNELS_OBJ)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $(filter %.c %.o,$^) $(KERNELS_LIBS)

# The host emulation of CUDA, cuBLAS and NCCL (tests/gpu/host, README.md
# there): the CUDA backend's own sources and agent/net/nccl.c compiled as host
# code, so make test runs them under the sanitizers on a machine with no GPU.
HOSTCUDA_DIR      := tests/gpu/host
HOSTCUDA_CXXFLAGS := -std=c++17 -Wall -Wextra -Werror -O2 -g -pthread -fopenmp -MMD -MP -ftls-model=initial-exec \
                     -I$(HOSTCUDA_DIR) $(KERNELS_CFLAGS) \
                     $(filter -fsanitize% -fno-sanitize% -fno-omit-frame-pointer,$(CFLAGS))
HOSTCUDA_OBJ      := $(patsubst $(HOSTCUDA_DIR)/%.cc,$(BUILD)/hostcuda/%.o,$(wildcard $(HOSTCUDA_DIR)/*.cc))
HOSTCUDA_KERNELS  := $(patsubst kernels/%.cu,$(BUILD)/hostcuda/kernels/%.o,$(wildcard kernels/cuda_*.cu))
HOSTCUDA_CPU_OBJ  := $(filter-out $(BUILD)/kernels/cuda_%,$(KERNELS_OBJ))
HOSTCUDA_LIBS     := -lopenblas -fopenmp -lm -lstdc++

$(BUILD)/hostcuda/%.o: $(HOSTCUDA_DIR)/%.cc
	@mkdir -p $(@D)
	$(CXX) $(HOSTCUDA_CXXFLAGS) -c -o $@ $<

# The kernels without UBSan's null-pointer check (ASan still faults on a
# null access): GCC 12 at -O2 tests the flags of an unrelated shift instead
# of the address it checks when that address is an initial-exec
# thread-local (threadIdx, blockIdx), a false "member access within null
# pointer" in the flash attention kernels wherever blockIdx.y is 0.
$(BUILD)/hostcuda/kernels/%.o: kernels/%.cu
	@mkdir -p $(@D)
	$(CXX) $(HOSTCUDA_CXXFLAGS) $(if $(filter -fsanitize%,$(CFLAGS)),-fno-sanitize=null) -Ikernels -x c++ -c -o $@ $<

$(BUILD)/hostcuda/agent/net/nccl.o: agent/net/nccl.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -I$(HOSTCUDA_DIR) -c -o $@ $<

# test_kernels_gpu's sources against the emulated device.
$(BUILD)/tests/gpu/test_kernels_host: $(wildcard tests/gpu/*.c) $(MODELS_OBJ) $(HOSTCUDA_CPU_OBJ) $(HOSTCUDA_KERNELS) $(HOSTCUDA_OBJ)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $(filter %.c %.o,$^) $(MODELS_LIBS) $(HOSTCUDA_LIBS)

# agent/net/nccl.c's groups, ranks as threads of one process, against a real server.
$(BUILD)/tests/gpu/test_nccl_host: $(wildcard tests/gpu/nccl/*.c tests/gpu/nccl/*.h) tests/gpu/gpu_check.c \
        $(BUILD)/hostcuda/agent/net/nccl.o \
        $(filter-out $(BUILD)/agent/net/nccl%,$(AGENT_OBJ)) $(COMMON_OBJ) $(MODELS_OBJ) $(HOSTCUDA_CPU_OBJ) \
        $(HOSTCUDA_KERNELS) $(HOSTCUDA_OBJ)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $(filter %.c %.o,$^) $(LDLIBS) -lcurl $(HOSTCUDA_LIBS)

deps:
	@sh deploy/deps.sh $(DEB_COMMANDS:%=--command %) $(NPM_DIRS:%=--npm %) $(DEB_PACKAGES)

# Tests always run the sanitizer build, so CI and a developer see the same thing.
# The release binaries and kernel tools are built too, so CI compiles the CUDA
# backend and sees what -O2 alone warns about.
test: deps
	@$(MAKE) --no-print-directory SAN=1 build/san/bin/shoal-server build/san/bin/shoal-sched build/san/bin/shoal-agent build/san/bin/shoal-relay $(UNIT_SRC:tests/unit/%.c=build/san/tests/%) \
	    build/san/tests/gpu/test_kernels_host build/san/tests/gpu/test_nccl_host
	@$(MAKE) --no-print-directory all build/rel/tests/gpu/test_kernels_gpu build/rel/bench/bench_kernels \
	    build/rel/bench/bench_pipeline
	@sh tests/run.sh build/san

# The images built from deploy/ and the compose stack run in containers: a job
# trained by two agent containers, kept across down and up (.ci/run runs it
# after make test; tests/deploy/containers.sh says why when it skips).
test-deploy: deps
	@bash tests/deploy/containers.sh

# On a GPU machine: the CUDA backend against the CPU oracle (exit 77: no device).
test-gpu: deps
	@$(MAKE) --no-print-directory build/rel/tests/gpu/test_kernels_gpu
	build/rel/tests/gpu/test_kernels_gpu

# BENCH_ARGS="--only xl-mid-b2 --steps 20" narrows it; PyTorch runs the same configs.
bench-kernels: deps
	@$(MAKE) --no-print-directory build/rel/bench/bench_kernels
	@bash tests/bench/bench_kernels.sh build/rel/bench/bench_kernels $(BENCH_ARGS)

# Two CUDA agents, one GPU, a 2-stage job per stage-link type, beside
# bench_pipeline's kernels-only step (tests/gpu/pipeline_bench.sh; DEVICE=cpu
# and a small MODEL check the script on a machine without a GPU).
bench-gpu-pipeline: deps
	@$(MAKE) --no-print-directory all build/rel/bench/bench_pipeline
	@bash tests/gpu/pipeline_bench.sh bin/shoal-server bin/shoal-agent build/rel/bench/bench_pipeline

# Benchmarks print a table and JSON lines; they are not tests.
# bench-peer: activation frames against plain TCP on loopback, the ring
# all-reduce, then a 2x2 CPU training run's step time split.
# bench-relay: a sealed job connection direct and through shoal-relay on
# shaped links in network namespaces (root), then through a relay on
# loopback: throughput against the link, the relay's CPU per Gbit/s.
bench-relay: deps all
	@$(MAKE) --no-print-directory build/rel/bench/bench_relay
	@bash tests/bench/bench_relay.sh bin/shoal-relay build/rel/bench/bench_relay $(RELAY_ARGS)

bench-peer: deps all
	@$(MAKE) --no-print-directory build/rel/bench/bench_peer
	build/rel/bench/bench_peer $(BENCH_ARGS)
	@bash tests/bench/bench_train.sh bin/shoal-server bin/shoal-agent

# TESTBED_ARGS="--steps 10 --plans shoal,random" narrows it; TESTBED_NETS picks the networks.
TESTBED_NETS ?= tests/net/two-region.json tests/net/three-region.json
testbed: deps all
	@bash tests/net/testbed.sh $(TESTBED_ARGS) $(TESTBED_NETS)

# WAN_ARGS="--steps 64 --modes baseline,diloco-h8" narrows it (tests/net/README.md).
bench-wan: deps all
	@bash tests/net/wan.sh $(WAN_ARGS)

# FAULTS_ARGS="--seed 7 --trials 3 --only kill-agent,kill-two" repeats or narrows the campaign.
bench-faults: deps all
	@bash tests/bench/bench_faults.sh bin/shoal-server bin/shoal-agent $(FAULTS_ARGS)

# GPT2_BIN=gpt2_124M.bin GPT2_DATA=shard.bin CONTEXT=64 FINETUNE_STEPS=4: real weights and data.
bench-finetune: deps all
	@bash tests/bench/bench_finetune.sh bin/shoal-server bin/shoal-agent $(FINETUNE_STEPS)

bench-tokenize: deps all
	@bash tests/bench/bench_tokenize.sh bin/shoal-agent $(TOKENIZE_MB)

bench-sched: all
	@sh tests/bench/bench_sched.sh bin/shoal-sched

# bench-sched-long: hours; refreshes the best known costs bench-sched compares with.
bench-sched-long: all
	@sh tests/bench/bench_sched_long.sh bin/shoal-sched

# bench-load: simulated agents (tests/load/) in steps against a release server on an
# embedded Postgres, then wrk heartbeats at full rate beside 1,000 of them.
# LOAD_STEPS="1000" LOAD_WRK_S=0 and the other LOAD_* variables narrow it (tests/load/README.md).
LOADGEN_SRC := $(wildcard tests/load/*.c)

$(BUILD)/bench/loadgen: $(LOADGEN_SRC) $(wildcard tests/load/*.h)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $(LOADGEN_SRC) -ljansson -lm

bench-load: deps all
	@$(MAKE) --no-print-directory build/rel/bench/loadgen
	@bash tests/bench/bench_load.sh bin/shoal-server build/rel/bench/loadgen

# libFuzzer targets, tests/fuzz/fuzz_*.c (see tests/fuzz/README.md), built with
# clang by a sub-make (FUZZ=1) into $(FUZZ_BUILD)/bin: every object coverage-
# instrumented under ASan and UBSan, CPU only and without OpenMP (one thread).
# `make fuzz` runs each for FUZZ_SECONDS on a copy of its corpus (new inputs
# and crashes land in $(FUZZ_BUILD), the repository's corpus stays as it is);
# make test runs tests/integration/test_fuzz.sh, which builds them the same way.
FUZZ_CC      ?= clang
FUZZ_BUILD   ?= build/fuzz
FUZZ_SECONDS ?= 60
FUZZ_NAMES   := $(patsubst tests/fuzz/%.c,%,$(wildcard tests/fuzz/fuzz_*.c))
ifdef FUZZ
CFLAGS  += -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
LDFLAGS += -fsanitize=fuzzer,address,undefined
endif
# What each target links besides common/; one not listed links what the unit tests do.
FUZZ_OWN_LINK := fuzz_bodies fuzz_sched_files fuzz_checkpoint fuzz_dataset fuzz_peer fuzz_tokenizer \
                 fuzz_gpt2_llmc fuzz_safetensors fuzz_hf_llama fuzz_bpe fuzz_relay
$(BUILD)/bin/fuzz_bodies: $(BUILD)/server/api/bodies.o $(BUILD)/server/jobs/jobspec.o $(SCHED_OBJ)
$(BUILD)/bin/fuzz_sched_files: $(BUILD)/server/jobs/jobspec.o $(SCHED_OBJ)
$(BUILD)/bin/fuzz_checkpoint: $(MODELS_OBJ) $(KERNELS_OBJ)
$(BUILD)/bin/fuzz_gpt2_llmc: $(MODELS_OBJ) $(KERNELS_OBJ)
$(BUILD)/bin/fuzz_safetensors: $(MODELS_OBJ) $(KERNELS_OBJ)
$(BUILD)/bin/fuzz_hf_llama: $(MODELS_OBJ) $(KERNELS_OBJ)
$(BUILD)/bin/fuzz_dataset: $(BUILD)/agent/train/data.o $(BUILD)/agent/train/digests.o $(BUILD)/agent/train/roots.o
$(BUILD)/bin/fuzz_tokenizer: $(BUILD)/agent/tools/tokenizer.o
$(BUILD)/bin/fuzz_bpe: $(BUILD)/agent/tools/bpe.o $(BUILD)/agent/tools/bpe_pattern.o $(BUILD)/agent/tools/bpe_files.o $(BUILD)/agent/tools/tokenizer.o
$(BUILD)/bin/fuzz_peer: $(filter $(BUILD)/agent/net/peer%,$(AGENT_OBJ))
$(BUILD)/bin/fuzz_relay:   # common/ alone: the relay's request and the server's tickets
$(patsubst %,$(BUILD)/bin/%,$(filter-out $(FUZZ_OWN_LINK),$(FUZZ_NAMES))): $(SERVER_OBJ) $(AGENT_OBJ) $(MODELS_OBJ) $(KERNELS_OBJ)

$(BUILD)/bin/fuzz_%: tests/fuzz/fuzz_%.c $(COMMON_OBJ)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $(filter %.c %.o,$^) $(LDLIBS) -lcurl $(KERNELS_LIBS)

.PHONY: fuzz-build
fuzz-build:
	@$(MAKE) --no-print-directory FUZZ=1 CC=$(FUZZ_CC) CUDA=0 BUILD=$(FUZZ_BUILD) \
	    KERNELS_CFLAGS=-I/usr/include/x86_64-linux-gnu/openblas-openmp 'KERNELS_LIBS=-lopenblas -lm' \
	    $(FUZZ_NAMES:%=$(FUZZ_BUILD)/bin/%)

fuzz: fuzz-build
	@sh tests/fuzz/run.sh --seconds $(FUZZ_SECONDS) --keep $(FUZZ_BUILD) $(FUZZ_BUILD)/bin

# DEMO_STEPS=, DEMO_PORT=, DEMO_KEEP=1: see deploy/demo.sh.
demo: deps all
	@bash deploy/demo.sh $(BINDIR)

clean:
	rm -rf build bin

-include $(shell find build -name '*.d' 2>/dev/null)
