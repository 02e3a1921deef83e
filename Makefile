# Front door. `make demo` and `make test` each install what is missing, build and run.
BUILD_DIR ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=
CTEST_FLAGS ?=

.PHONY: all setup configure build demo test bench-kernels bench-tta clean

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

bench-kernels: build
	bash bench/run_kernels.sh $(BUILD_DIR)

clean:
	rm -rf $(BUILD_DIR)

# Time to accuracy vs PyTorch DDP on shaped links (docs/benchmarks.md). Needs root.
# QUICK=1: reduced set, < 10 min. TTA_SCENARIOS=mlp-flat-100,... picks scenarios.
bench-tta: build
	/usr/bin/python3 bench/tta/run.py --build-dir $(BUILD_DIR) $(if $(QUICK),--quick,$(if $(TTA_SCENARIOS),--scenarios $(TTA_SCENARIOS),))
