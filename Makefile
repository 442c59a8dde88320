# pagellm build. `make run` and `make test` install missing Debian packages,
# build, then generate text or run every test. See README.md.
#
#   build/libpagellm.a         every src/<module>/*.c (the engine)
#   build/libpagellm_server.a  server/*.c: HTTP, OpenAI API, SSE, metrics
#                              (sees include/ only: the public door)
#   build/pagellm              cli/*.c and the `pagellm bench` commands in
#                              bench/*.c (include/ and server/ headers only)
#   build/bench/bench_*        one micro-benchmark per bench/micro/*.c
#                              (sees src/ and the tests' data makers in
#                              tests/*.h: white-box, like the tests)
#   build/tests/test_*         one binary per tests/test_*.c (white-box)
#
# CI=true turns warnings into errors. `make asan` builds the same tree with
# AddressSanitizer + UBSan into build-asan/ and runs the tests there.

CC      ?= cc
BUILD   ?= build
OPT     ?= -O2
SAN     ?=
CFLAGS  := -std=c11 $(OPT) -g -Wall -Wextra -D_GNU_SOURCE -pthread $(SAN)
ifeq ($(CI),true)
CFLAGS  += -Werror
endif
# `make run` and `make test` build with one compiler a core (a clean tree's
# `all` takes about half the wall time of a serial build on two cores)
JOBS    ?= $(shell nproc 2>/dev/null || echo 2)
LIBS    := -lpcre2-8 -lxxhash -ljansson -lmicrohttpd -lgnutls -lhiredis -lm -lpthread
# FAULTS=1 (make faults): our allocation, file-read and file-write calls pass through
# src/base/fault.c, where PAGELLM_FAULT can make the Nth one fail
ifeq ($(FAULTS),1)
CFLAGS  += -DPL_FAULTS
LIBS    += $(foreach f,malloc calloc realloc posix_memalign strdup strndup open fopen mmap write pwrite pwritev,-Wl,--wrap=$(f))
endif

SRC     := $(sort $(wildcard src/*/*.c))
SRVSRC  := $(sort $(wildcard server/*.c))
CLISRC  := $(sort $(wildcard cli/*.c bench/*.c))
MICROSRC:= $(sort $(wildcard bench/micro/*.c))
TESTSRC := $(sort $(wildcard tests/test_*.c))
OBJ     := $(SRC:%.c=$(BUILD)/obj/%.o)
SRVOBJ  := $(SRVSRC:%.c=$(BUILD)/obj/%.o)
CLIOBJ  := $(CLISRC:%.c=$(BUILD)/obj/%.o)
MICROBIN:= $(MICROSRC:bench/micro/%.c=$(BUILD)/bench/%)
MICROINC:= -Isrc -Iinclude -Itests
TESTBIN := $(TESTSRC:tests/%.c=$(BUILD)/tests/%)
LIBPL   := $(BUILD)/libpagellm.a
LIBSRV  := $(BUILD)/libpagellm_server.a

MODEL   ?= $(PAGELLM_MODEL)

.PHONY: all deps run model test asan faults fuzz bench clean peer cross-arm64 test-arm64

all: $(BUILD)/pagellm $(TESTBIN) $(MICROBIN)

deps:
	@bash scripts/deps.sh

$(BUILD)/obj/src/%.o: src/%.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Isrc -Iinclude -MMD -MP -c $< -o $@

$(BUILD)/obj/server/%.o: server/%.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Iinclude -MMD -MP -c $< -o $@

$(BUILD)/obj/cli/%.o: cli/%.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Iinclude -Iserver -Ibench -MMD -MP -c $< -o $@

$(BUILD)/obj/bench/%.o: bench/%.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Iinclude -Icli -MMD -MP -c $< -o $@

$(LIBPL): $(OBJ)
	@rm -f $@
	ar rcs $@ $^

# The web page (server/web/) is compiled into the server library.
WEBSRC  := $(sort $(wildcard server/web/*))
WEBOBJ  := $(BUILD)/obj/gen/server_web_assets.o
SRVOBJ  += $(WEBOBJ)

$(BUILD)/gen/server_web_assets.c: $(WEBSRC) scripts/embed_web.sh
	@mkdir -p $(dir $@)
	bash scripts/embed_web.sh $@ $(WEBSRC)

$(WEBOBJ): $(BUILD)/gen/server_web_assets.c server/server_web.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Iinclude -Iserver -c $< -o $@

$(LIBSRV): $(SRVOBJ)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/pagellm: $(CLIOBJ) $(LIBSRV) $(LIBPL)
	$(CC) $(CFLAGS) -o $@ $(CLIOBJ) $(LIBSRV) $(LIBPL) $(LIBS)

$(BUILD)/tests/%: tests/%.c $(LIBSRV) $(LIBPL)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Isrc -Iinclude -Iserver -Itests -MMD -MP -o $@ $< $(LIBSRV) $(LIBPL) $(LIBS)

$(BUILD)/bench/%: bench/micro/%.c $(LIBPL)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(MICROINC) -MMD -MP -o $@ $< $(filter %.o,$^) $(LIBPL) $(LIBS)

# bench_fma_peak prints what `bench speed` measures (bench/fma_peak.c)
$(BUILD)/bench/bench_fma_peak: $(BUILD)/obj/bench/fma_peak.o

-include $(OBJ:.o=.d) $(SRVOBJ:.o=.d) $(CLIOBJ:.o=.d) $(MICROBIN:=.d) $(TESTBIN:=.d)

$(BUILD)/models/tiny.gguf: $(BUILD)/pagellm
	@mkdir -p $(dir $@)
	$(BUILD)/pagellm synth --shape tiny --seed 1 -o $@

peer:
	@bash tests/peer.sh

# `make run` generates from PAGELLM_MODEL (or MODEL); else from
# models/stories260K.gguf, which `make model` fetches (a copy from
# SHARED_MODELS, else a download from MODEL_URL, checked by sha256); else
# from the random synthetic build/models/tiny.gguf, saying so in one line.
# scripts/model.sh has the rules.
PROMPT  ?= Once upon a time
MODELS_DIR    ?= models
SHARED_MODELS ?= ../shared/models
MODEL_ENV = BUILD=$(BUILD) MODELS_DIR=$(MODELS_DIR) SHARED_MODELS=$(SHARED_MODELS) \
            $(if $(MODEL_URL),MODEL_URL=$(MODEL_URL)) PAGELLM_MODEL='$(MODEL)'
run: deps
	@$(MAKE) --no-print-directory -j$(JOBS) $(BUILD)/pagellm
	@m=$$($(MODEL_ENV) bash scripts/model.sh choose) && \
	  $(BUILD)/pagellm inspect "$$m" && \
	  $(BUILD)/pagellm run -m "$$m" -p "$(PROMPT)" -n 64

model:
	@$(MODEL_ENV) bash scripts/model.sh fetch

test: deps
	@$(MAKE) --no-print-directory -j$(JOBS) all
	@$(MAKE) --no-print-directory peer
	@$(MAKE) --no-print-directory -j$(JOBS) faults
	@BUILD=$(BUILD) bash tests/run.sh

asan: deps
	@$(MAKE) --no-print-directory -j$(JOBS) BUILD=build-asan OPT=-O1 \
	  SAN="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all" all
	@$(MAKE) --no-print-directory peer
	@BUILD=build-asan ASAN_OPTIONS=detect_leaks=1 bash tests/run.sh

# The fault-injection build (ASan + UBSan + FAULTS=1) in build-faults/: the
# program and the C harness that tests/cli/test_faults.sh sweeps.
FAULTS_SAN := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all
faults:
	@$(MAKE) --no-print-directory BUILD=build-faults OPT=-O1 FAULTS=1 SAN="$(FAULTS_SAN)" \
	  build-faults/pagellm build-faults/faults/fault_sweep

$(BUILD)/faults/%: tests/faults/%.c $(LIBPL)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Isrc -Iinclude -Itests -MMD -MP -o $@ $< $(LIBPL) $(LIBS)

# each target fuzzes FUZZ_SECONDS: the GGUF reader/writer, the tokenizer,
# the model's config and tensor binding (it links the kernels from LIBPL),
# the server's request JSON and other request parsers, the command-line flags, the GBNF
# parser/matcher, the JSON-schema compiler, the Jinja interpreter,
# the KV tier entry reader and segment scan, the server's request-head checker,
# the importance matrix reader
FUZZ_SECONDS ?= 60
fuzz: deps $(LIBPL)
	@bash tests/fuzz/run.sh $(FUZZ_SECONDS) gguf
	@bash tests/fuzz/run.sh $(FUZZ_SECONDS) tokenizer
	@FUZZ_LIBPL=$(LIBPL) bash tests/fuzz/run.sh $(FUZZ_SECONDS) model
	@bash tests/fuzz/run.sh $(FUZZ_SECONDS) openai
	@bash tests/fuzz/run.sh $(FUZZ_SECONDS) cli
	@bash tests/fuzz/run.sh $(FUZZ_SECONDS) grammar
	@bash tests/fuzz/run.sh $(FUZZ_SECONDS) schema
	@bash tests/fuzz/run.sh $(FUZZ_SECONDS) server
	@bash tests/fuzz/run.sh $(FUZZ_SECONDS) jinja
	@bash tests/fuzz/run.sh $(FUZZ_SECONDS) store
	@bash tests/fuzz/run.sh $(FUZZ_SECONDS) segment
	@bash tests/fuzz/run.sh $(FUZZ_SECONDS) head
	@bash tests/fuzz/run.sh $(FUZZ_SECONDS) imatrix

bench: deps
	@$(MAKE) --no-print-directory all
	@$(MAKE) --no-print-directory peer
	@bash bench/run.sh

# Compile-only check that the library builds for arm64 (the AVX2 files
# compile to stubs there); needs apt's gcc-aarch64-linux-gnu.
CROSS_ARM64 ?= aarch64-linux-gnu-gcc
cross-arm64:
	@command -v $(CROSS_ARM64) >/dev/null || { echo "cross-arm64: $(CROSS_ARM64) not found (apt-get install gcc-aarch64-linux-gnu)"; exit 1; }
	@mkdir -p $(BUILD)/arm64
	@for f in $(SRC); do \
	  $(CROSS_ARM64) -std=c11 $(OPT) -Wall -Wextra -Werror -D_GNU_SOURCE -pthread -Isrc -Iinclude \
	    -c $$f -o $(BUILD)/arm64/$$(echo $$f | tr / _).o || exit 1; done
	@echo "cross-arm64: all $(words $(SRC)) library sources compile for aarch64"

# The kernel tests cross-built for aarch64 (static) and run under qemu-user:
# the NEON variant against the reference, with and without the dot-product
# extension (tests/arm64.sh; also one entry of `make test`). Prints SKIP and
# succeeds without gcc-aarch64-linux-gnu or qemu-user.
test-arm64:
	@BUILD=$(BUILD) CROSS_ARM64=$(CROSS_ARM64) bash tests/arm64.sh

clean:
	rm -rf build build-asan build-fuzz build-faults
