# Thin wrapper over CMake (the source of truth). `make` builds build/ctrain.
BUILD ?= build
JOBS ?= $(shell nproc)

.PHONY: all test test-gpu test-fast demo asan clang nompi clean bench-tokenizer bench-hf-tokenizer bench-train fuzz fuzz-build fuzz-corpus

all:
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release >/dev/null
	cmake --build $(BUILD) -j $(JOBS)

# The whole suite: unit and kernel tests, CLI and PyTorch parity tests, then the
# unit and kernel tests again under ASan+UBSan. The library is also compiled
# with clang (make clang), so code only gcc accepts cannot land.
test: all asan clang
	cd $(BUILD) && ctest --output-on-failure -j 2
	cd build-asan && ctest --output-on-failure -L unit

# The GPU tests (ctest label gpu): the kernel checks with the CUDA backend held
# to ref, and the training suite with run.device=cuda. `make test` runs them
# too and they skip without a GPU; here a missing GPU is a failure.
test-gpu: all
	cd $(BUILD) && CT_GPU_REQUIRED=1 ctest --output-on-failure -L gpu

asan:
	cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DCT_SANITIZE=ON -DCT_CUDA=OFF >/dev/null
	cmake --build build-asan -j $(JOBS)

# The library (kernels included) compiled with clang, warnings as errors, in
# build-clang: gcc-only constructs (__builtin_shuffle, nested functions, ...)
# break `make fuzz`, which builds with clang. No tests, no program: about a
# minute on 2 cores.
clang:
	@command -v clang >/dev/null 2>&1 || { echo "make clang: clang is not installed"; \
		echo "(scripts/bootstrap.sh installs it); nothing was built"; exit 1; }
	cmake -S . -B build-clang -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=Release -DCT_WERROR=ON \
		-DCT_TESTS=OFF -DCT_BENCH=OFF -DCT_CUDA=OFF >/dev/null
	cmake --build build-clang -j $(JOBS) --target ctrain_lib

demo: all
	scripts/demo.sh

# Tokenizer throughput against the gpt-3-encoder reference (one thread each).
bench-tokenizer: all
	bench/bench_tokenizer.sh $(BUILD)

# The same for Llama 3.1, Qwen3 and Gemma 3's tokenizer.json against transformers.js's
# tokenizers (@lenml/tokenizers), 3 runs each (about 5 minutes).
bench-hf-tokenizer: all
	bench/bench_hf_tokenizer.sh $(BUILD) 3

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

# Fuzzing (tests/fuzz/): every reader's libFuzzer harness, built with clang,
# ASan and UBSan against an instrumented library in $(FUZZ_BUILD), runs
# FUZZ_SECONDS each on a copy of its seed corpus, FUZZ_JOBS at a time; findings
# go to tests/fuzz/reproducers/ (which `make test` replays). FUZZ_KEEP_GOING=1
# goes on after a finding; FUZZ_HARNESSES="yaml shard" runs only those.
FUZZ_SECONDS ?= 60
FUZZ_BUILD ?= build-fuzz
FUZZ_JOBS ?= 1
FUZZ_HARNESSES ?=
FUZZ_KEEP_GOING ?= 0
fuzz-build:
	cmake -S . -B $(FUZZ_BUILD) -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=RelWithDebInfo \
		-DCT_SANITIZE=ON -DCT_FUZZ=ON -DCMAKE_C_FLAGS=-fsanitize=fuzzer-no-link \
		-DCT_OPENMP=OFF -DCT_MPI=OFF -DCT_BENCH=OFF -DCT_CUDA=OFF >/dev/null
	cmake --build $(FUZZ_BUILD) -j $(JOBS) --target fuzz_all

fuzz: fuzz-build
	FUZZ_KEEP_GOING=$(FUZZ_KEEP_GOING) tests/fuzz/run_fuzz.sh $(FUZZ_BUILD) $(FUZZ_SECONDS) $(FUZZ_JOBS) $(FUZZ_HARNESSES)

# Rewrite the seed corpora (tests/fuzz/corpus/) from the library and a tiny run.
fuzz-corpus: all
	tests/fuzz/make_corpus.sh $(BUILD)

# The soak (tests/soak/soak.py): SOAK_KILLS SIGKILLs (default 100) at random
# moments of a small training run, about half aimed at checkpoint writes, each
# followed by train.resume=auto; every run that reaches its end must equal an
# uninterrupted one (weights, checkpoints, metrics.jsonl) and leave nothing
# behind in run.dir. SOAK_SEED=S repeats a soak (default: random, printed);
# SOAK_ARGS passes more options (soak.py --help). `make soak-mpi`: the same
# under `mpirun -np 2` with dist.zero=1, killing rank 0, rank 1 or both.
SOAK_KILLS ?= 100
SOAK_SEED ?=
SOAK_ARGS ?=
.PHONY: soak soak-mpi valgrind
soak: all
	/usr/bin/python3 tests/soak/soak.py --ctrain $(BUILD)/ctrain --kills $(SOAK_KILLS) \
		$(if $(SOAK_SEED),--seed $(SOAK_SEED)) $(SOAK_ARGS)

soak-mpi: all
	@command -v mpirun >/dev/null 2>&1 || { echo "make soak-mpi: mpirun is not on PATH"; \
		echo "(Debian/Ubuntu: apt-get install openmpi-bin libopenmpi-dev); nothing was run"; exit 1; }
	/usr/bin/python3 tests/soak/soak.py --mpirun --ctrain $(BUILD)/ctrain --kills $(SOAK_KILLS) \
		$(if $(SOAK_SEED),--seed $(SOAK_SEED)) $(SOAK_ARGS)

# The CLI tests again with ctrain under valgrind's memcheck (--error-exitcode=1,
# --leak-check=full, definite leaks are errors), built without -march=native
# (valgrind does not decode every AVX-512 instruction) in $(VALGRIND_BUILD).
# Prints each error once with its file:line and a command that hits it; logs
# in $(VALGRIND_BUILD)/valgrind-logs. VALGRIND_TESTS="resume eval" runs only
# those (default: tests/soak/valgrind_run.py's list); about 20 min on 2 cores.
VALGRIND_BUILD ?= build-valgrind
VALGRIND_TESTS ?=
VALGRIND_JOBS ?= 2
valgrind:
	@command -v valgrind >/dev/null 2>&1 || { echo "make valgrind: valgrind is not installed"; \
		echo "(Debian/Ubuntu: apt-get install valgrind); nothing was run"; exit 1; }
	cmake -S . -B $(VALGRIND_BUILD) -DCMAKE_BUILD_TYPE=Debug -DCT_NATIVE=OFF -DCT_TESTS=OFF \
		-DCT_BENCH=OFF -DCT_CUDA=OFF >/dev/null
	cmake --build $(VALGRIND_BUILD) -j $(JOBS) --target ctrain
	/usr/bin/python3 tests/soak/valgrind_run.py --ctrain $(VALGRIND_BUILD)/ctrain \
		--jobs $(VALGRIND_JOBS) --logs $(VALGRIND_BUILD)/valgrind-logs $(VALGRIND_TESTS)

clean:
	rm -rf $(BUILD) build-asan build-clang build-nompi build-valgrind
