# Front door. `make demo` and `make test` each install what is missing, build and run.
BUILD_DIR ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=
CTEST_FLAGS ?=

# Sanitizer builds (docs/design/security.md): make test SANITIZE=address,undefined
# (or address) builds the whole suite with ASan+UBSan in build-asan;
# SANITIZE=thread builds the torch-free modules (LibTorch's OpenMP runtime is
# not TSan-instrumented) with TSan in build-tsan. Any report fails its test.
SANITIZE ?=
ifneq ($(SANITIZE),)
  ifeq ($(SANITIZE),thread)
    BUILD_DIR := build-tsan
    CMAKE_FLAGS += -DFRUGAL_SANITIZE=thread -DFRUGAL_WITH_TORCH=OFF
    export TSAN_OPTIONS ?= halt_on_error=1 second_deadlock_stack=1 suppressions=$(CURDIR)/scripts/tsan.supp
  else
    BUILD_DIR := build-asan
    CMAKE_FLAGS += -DFRUGAL_SANITIZE=address,undefined
    export ASAN_OPTIONS ?= detect_leaks=1:abort_on_error=1:strict_string_checks=1
    export UBSAN_OPTIONS ?= print_stacktrace=1:halt_on_error=1
  endif
  CMAKE_FLAGS += -DFRUGAL_BUILD_PYTHON=OFF -DFRUGAL_BUILD_BENCH=OFF
endif
# make fuzz FUZZ_S=N: every libFuzzer target (fuzz/) for N seconds, in build-fuzz.
FUZZ_S ?= 60

# make sanitize-core: only the comm and engine-core tests, built and run under
# ASan+UBSan in build-asan (CI runs this; docs/design/security.md, "Sanitizers").
SANITIZE_CORE_TESTS := src/comm/frugal_comm_test src/engine/frugal_engine_core_test \
  src/engine/frugal_compressed_allreduce_test src/engine/frugal_launcher_test

# make sanitize-thread: the torch-free threaded tests (comm, engine core,
# control) under TSan in build-tsan, with scripts/tsan.supp for the accesses
# inside the uninstrumented libzmq and libsodium (CI runs this; docs/design/security.md).
# The throughput-bound tests cannot meet their deadlines at TSan's speed (a
# message in parts must see each part within the receive timeout of the last).
SANITIZE_THREAD_TESTS := $(SANITIZE_CORE_TESTS) src/control/frugal_control_test
TSAN_SKIP := ZmqTransportTest.BusyTimeRunsUntilTheReceiverAcknowledges:ZmqTransportTest.AMessageSlowerThanTheTimeoutArrivesWhileItsPartsDo

.PHONY: all setup configure build demo test fuzz sanitize-core sanitize-thread bench-kernels bench-tta clean

all: build

setup:
	bash scripts/setup

$(BUILD_DIR)/build.ninja:
	cmake -S . -B $(BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS)

configure: setup $(BUILD_DIR)/build.ninja

build: configure
	cmake --build $(BUILD_DIR) -j $(JOBS)

demo: build
	$(BUILD_DIR)/frugal train

test: build
	cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS) $(CTEST_FLAGS)

fuzz: setup
	bash scripts/fuzz $(FUZZ_S)

sanitize-core:
	$(MAKE) configure SANITIZE=address,undefined
	cmake --build build-asan -j $(JOBS) --target $(notdir $(SANITIZE_CORE_TESTS)) frugal_comm_test_peer
	cd build-asan && for t in $(SANITIZE_CORE_TESTS); do echo "== $$t"; \
	  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:strict_string_checks=1 \
	  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 ./$$t || exit 1; done

sanitize-thread:
	$(MAKE) configure SANITIZE=thread
	cmake --build build-tsan -j $(JOBS) --target $(notdir $(SANITIZE_THREAD_TESTS)) frugal_comm_test_peer
	cd build-tsan && for t in $(SANITIZE_THREAD_TESTS); do echo "== $$t"; \
	  TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$(CURDIR)/scripts/tsan.supp" \
	  ./$$t --gtest_filter=-$(TSAN_SKIP) || exit 1; done

bench-kernels: build
	bash bench/run_kernels.sh $(BUILD_DIR)

clean:
	rm -rf $(BUILD_DIR)

# Time to accuracy vs PyTorch DDP on shaped links (bench/tta/README.md, docs/results.md). Needs root.
# QUICK=1: reduced set, < 10 min. TTA_SCENARIOS=mlp-flat-100,... picks scenarios.
bench-tta: build
	/usr/bin/python3 bench/tta/run.py --build-dir $(BUILD_DIR) $(if $(QUICK),--quick,$(if $(TTA_SCENARIOS),--scenarios $(TTA_SCENARIOS),))
