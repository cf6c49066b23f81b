# Thin wrapper over CMake. The two commands of the README:
#   make run    set up, build, prepare the default corpus, train, sample
#   make test   set up, build, run the whole suite with CTest
# `build` and `run` need only the build + run packages (setup.sh); the test
# suite is configured (-DLF_TESTS=ON, needs cmocka) by `test` and `asan` alone.
# `build` leaves LF_TESTS as the build directory has it, so a directory
# `make test` configured keeps its tests.
BUILD    ?= build
JOBS     ?= $(shell nproc 2>/dev/null || echo 2)
DATA     ?= /usr/share/games/fortunes
RUN_DIR  ?= out/run
CONFIG   ?= configs/default_run.json
# ITERS=N trains N steps instead of the configuration's train_iters, the
# cosine decaying over those N (the last step is always checkpointed).
# Without ITERS, `run` times a few steps first (scripts/run_steps.sh) and
# trains as many of the configuration's steps as fit RUN_SECONDS here, so
# the first run is short on a slow CPU too; the sample stays readable.
ITERS    ?=
RUN_SECONDS ?= 240
# the live dashboard of `make run` on 127.0.0.1 (train logs its URL; a port
# that is taken moves to a free one); DASHBOARD_PORT=0 turns it off. At the
# end the trainer writes $(RUN_DIR)/report.html.
DASHBOARD_PORT ?= 8765
# CUDA_ARCHS="80-virtual;90-virtual" (CI): the CUDA device code as PTX only,
# which checks that it compiles for each architecture without the SASS
# that only a GPU runs (ptxas is most of nvcc's time). Empty: CMake's
# cache, by default sm_80 and sm_90 code plus compute_90 PTX.
CUDA_ARCHS ?=
CUDA_ARGS = $(if $(CUDA_ARCHS),-DCMAKE_CUDA_ARCHITECTURES="$(CUDA_ARCHS)")

.PHONY: all build setup setup-test test asan run clean

all: build

setup:
	@bash scripts/setup.sh

setup-test:
	@bash scripts/setup.sh --test

build: setup
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release -DLF_WERROR=ON >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

test: setup-test
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release -DLF_WERROR=ON -DLF_TESTS=ON $(CUDA_ARGS) >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

# The sanitizer build runs no GPU test, so it compiles no device code
# (LF_CUDA=OFF): the CUDA kernels are under ASan through the shim.
asan: setup-test
	@cmake -S . -B build-asan -DLF_SANITIZE=ON -DLF_WERROR=ON -DLF_TESTS=ON -DLF_CUDA=OFF >/dev/null
	@cmake --build build-asan -j $(JOBS)
	cd build-asan && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 ctest --output-on-failure -j $(JOBS) -LE slow

run: build
	rm -rf $(RUN_DIR)
	$(BUILD)/llmforge prepare --char $(DATA) --out $(RUN_DIR)/data
	iters=$(ITERS); [ -n "$$iters" ] || iters=$$(bash scripts/run_steps.sh $(BUILD)/llmforge $(CONFIG) $(RUN_DIR)/data $(RUN_SECONDS)); \
	$(BUILD)/llmforge train $(CONFIG) --data.dataset=$(RUN_DIR)/data --out_dir=$(RUN_DIR) \
		--train_iters=$$iters --scheduler.decay_iters=$$iters \
		--monitor.dashboard.port=$(DASHBOARD_PORT) --monitor.dashboard.host=127.0.0.1
	$(BUILD)/llmforge sample --ckpt $(RUN_DIR)/ckpt/latest --prompt "$${PROMPT:-Q: }" --max-new-tokens 300 --temperature 0.8 --top-k 40 --seed 1

clean:
	rm -rf $(BUILD) build-asan
