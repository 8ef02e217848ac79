# Thin wrapper: every target installs missing Debian packages first (scripts/install-deps.sh).
BUILD_DIR  ?= build
BUILD_TYPE ?= RelWithDebInfo
JOBS       ?= $(shell nproc)
# One test more than cores: the suite's scripts wait (on ranks, journals, sleeps) about a tenth of
# their time. On 2 cores, -j2 took 506 s and -j3 460 s, for the same CPU time (stop 52).
TEST_JOBS  ?= $(shell echo $$(( $$(nproc) + 1 )))
PYTHON     ?= /usr/bin/python3
FUZZ_SECONDS ?= 60

PIP_BUILD  ?= build-pip

.PHONY: all deps build test test-debian13 test-pip test-tokenizers tokenizer-reference demo demo-text bench gpu-check format clean sanitize tsan fuzz

all: build

deps:
	@scripts/install-deps.sh

$(BUILD_DIR)/build.ninja:
	@scripts/install-deps.sh
	cmake -S . -B $(BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=$(BUILD_TYPE)

build: deps $(BUILD_DIR)/build.ninja
	cmake --build $(BUILD_DIR) -j $(JOBS)

test: build
	ctest --test-dir $(BUILD_DIR) --output-on-failure -j $(TEST_JOBS) $(CTEST_ARGS)

# The same suite on Debian 13 (LibTorch 2.6, HDF5 1.14, CLI11 2.4, Catch2 3), in a root that
# scripts/debian13 makes with debootstrap once and reuses; built in build-debian13. The packages go
# in first: a new root (debootstrap's minbase) has no make; apt's downloaded .debs are not kept.
# Every tool runs as a process of its own here (TC_TOOL_SERVER=0): the other legs serve them from
# one process that loaded LibTorch already, and this one checks the tools' own start, OpenMP
# set-up, exit path and process identity on every path the suite takes.
test-debian13:
	scripts/debian13 sh -c 'scripts/install-deps.sh && apt-get clean'
	scripts/debian13 env TC_TOOL_SERVER=0 make test BUILD_DIR=build-debian13 JOBS=$(JOBS) TEST_JOBS=$(TEST_JOBS) \
	  CTEST_ARGS='$(CTEST_ARGS)'

# The same suite against pip's PyTorch (the LibTorch most users have): a virtual environment with
# PyPI's current torch and the tests' packages (scripts/pip-env; downloaded once, reused after),
# traincache built against its LibTorch in build-pip with warnings as errors, the Python
# tests run with that environment's python, the tokenizer parity live against PyPI's tokenizers.
# Release: no debug information to compile.
test-pip: deps
	scripts/pip-env $(PIP_BUILD)/venv
	cmake -S . -B $(PIP_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release -DTRAINCACHE_WERROR=ON \
	      -DTRAINCACHE_PYTHON=$(abspath $(PIP_BUILD))/venv/bin/python3 \
	      -DCMAKE_PREFIX_PATH="$$($(PIP_BUILD)/venv/bin/python3 -c 'import os, torch; print(os.path.dirname(torch.__file__))')"
	cmake --build $(PIP_BUILD) -j $(JOBS)
	TRAINCACHE_TOKENIZERS=live ctest --test-dir $(PIP_BUILD) --output-on-failure -j $(TEST_JOBS) $(CTEST_ARGS)

# The tokenizer parity tests against Hugging Face's tokenizers itself (PyPI's, in the pip leg's
# virtual environment) rather than its committed ids; tokenizer-reference remakes the committed ids.
test-tokenizers: build
	scripts/pip-env $(PIP_BUILD)/venv
	TRAINCACHE_TOKENIZERS=live TRAINCACHE_TOKENIZERS_PYTHON=$(abspath $(PIP_BUILD))/venv/bin/python3 \
	  ctest --test-dir $(BUILD_DIR) --output-on-failure -j $(JOBS) -R '^cli\.text_(parity|fill|train)$$'

tokenizer-reference: build
	scripts/make-tokenizer-reference $(BUILD_DIR) $(PIP_BUILD)/venv

demo: build
	scripts/demo.sh $(BUILD_DIR)
	scripts/demo-text.sh $(BUILD_DIR)

demo-text: build
	scripts/demo-text.sh $(BUILD_DIR)

bench: build
	$(PYTHON) bench/run-bench $(BUILD_DIR)

# On a machine with a CUDA GPU and PyTorch: builds against its LibTorch in build-cuda/ and compares
# traincache with PyTorch there (docs/gpu.md). Not part of make bench: CI has no GPU.
gpu-check:
	bench/gpu-check --build build-cuda --out build-cuda/gpu-check

# Sanitizer builds (not part of make test's time budget): ASan+UBSan runs the unit tests, the
# shared-memory CLI and fault tests, and the image tests of --decode device (decoding on the device
# path, here the CPU); TSan runs the slab, SmartCache and prefetcher unit tests.
sanitize: deps
	cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTRAINCACHE_SANITIZE=address,undefined \
	      -DTRAINCACHE_BUILD_BENCH=OFF
	cmake --build build-asan -j $(JOBS)
	ASAN_OPTIONS=detect_leaks=0:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  ctest --test-dir build-asan --output-on-failure --timeout 1800 -j $(JOBS) -R '^(fixtures|unit\.|fuzz\.|cli\.(shm_cache|inputs_images_(parity|errors))|faults\.(slabs|journal|symlinks))'

tsan: deps
	cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTRAINCACHE_SANITIZE=thread \
	      -DTRAINCACHE_BUILD_BENCH=OFF
	cmake --build build-tsan -j $(JOBS) --target core_test
	TSAN_OPTIONS=halt_on_error=1 build-tsan/tests/core_test '[shm],[smart],[prefetch]'

# libFuzzer harnesses (tests/fuzz) for FUZZ_SECONDS each; needs scripts/install-deps.sh --fuzz.
fuzz: build
	scripts/install-deps.sh --check --fuzz
	CC=clang-14 CXX=clang++-14 cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTRAINCACHE_FUZZ=ON
	cmake --build build-fuzz -j $(JOBS)
	$(PYTHON) scripts/make-test-fixtures build-fuzz/data
	scripts/make-fuzz-corpus $(BUILD_DIR)/bin build-fuzz/data build-fuzz/corpus
	scripts/run-fuzz build-fuzz $(FUZZ_SECONDS)

# Tracked C++ files and new ones not yet added (not the ignored: build folders, .gpu/).
format:
	clang-format-14 -i $$(git ls-files --cached --others --exclude-standard '*.cpp' '*.h')

clean:
	rm -rf $(BUILD_DIR)
