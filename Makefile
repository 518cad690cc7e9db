# Thin wrapper over CMake (the source of truth). `make` builds build/ctrain.
BUILD ?= build
JOBS ?= $(shell nproc)

.PHONY: all test test-fast demo asan nompi clean bench-tokenizer bench-train

all:
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release >/dev/null
	cmake --build $(BUILD) -j $(JOBS)

# The whole suite: unit and kernel tests, CLI and PyTorch parity tests, then the
# unit and kernel tests again under ASan+UBSan.
test: all asan
	cd $(BUILD) && ctest --output-on-failure -j 2
	cd build-asan && ctest --output-on-failure -L unit

asan:
	cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DCT_SANITIZE=ON >/dev/null
	cmake --build build-asan -j $(JOBS)

demo: all
	scripts/demo.sh

# Tokenizer throughput against the gpt-3-encoder reference (one thread each).
bench-tokenizer: all
	bench/bench_tokenizer.sh $(BUILD)

# Training steps side by side with PyTorch: gpt2, B=4, T=64/256/1024, 3 rounds, 2 threads
# (long: PyTorch alone needs about a minute per step at T=1024). Tables and raw numbers
# go to $(BUILD)/bench_train.md and $(BUILD)/bench_train.json.
bench-train: all
	/usr/bin/python3 bench/compare_torch.py --ctrain $(BUILD)/ctrain \
		--json-out $(BUILD)/bench_train.json --markdown $(BUILD)/bench_train.md

# The one-process build (no MPI), as on a machine without libopenmpi-dev.
nompi:
	cmake -S . -B build-nompi -DCMAKE_BUILD_TYPE=Release -DCT_MPI=OFF -DCT_TESTS=OFF -DCT_BENCH=OFF >/dev/null
	cmake --build build-nompi -j $(JOBS)

clean:
	rm -rf $(BUILD) build-asan build-nompi
