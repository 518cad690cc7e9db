#!/usr/bin/env bash
# One pass of the GPU checks, for a machine with an NVIDIA GPU that may be lent
# for minutes at a time: build, test, sanitize and time the CUDA backend in one
# command, and leave at most six files in OUTDIR (summary.md last and shortest).
#
#   scripts/gpu_check.sh OUTDIR
#
# Stages, most important first, each skipped (and said so) when the time left
# (GPU_CHECK_BUDGET_S, default 540 s from the start) is too short for it:
#   1. build    cmake + build in build-gpu (Release; CUDA for sm_80, sm_90 + PTX)
#   2. kernels  the kernel tests with the CUDA backend held to ref (ctest -L gpu,
#               the C ones): every kernel, forward and backward, fp32 and bf16
#   3. training the training suite on run.device=cuda (the gpu_* Python tests:
#               PyTorch parity, exact resume, guard, LoRA, instruction data)
#   4. bench    GPT-2 124M, T=1024, B=GPU_CHECK_BATCH (default 16): ctrain fp32 and
#               bf16 against PyTorch (compiled, SDPA attention, fused AdamW) bf16
#               and fp32, tokens/s and peak device memory
#   5. sanitize compute-sanitizer memcheck and racecheck on a 2-step tiny run
#
# Where the machine has no package registry, the build's libraries come from
# .debs made beforehand by `scripts/offline_deps.sh fetch .offline-deps` (copy
# that folder along; CT_DEPS names another). The tests run under CT_PYTHON
# (default: the python3 on PATH, which must import torch for the parity tests).
set -uo pipefail

if [ $# -ne 1 ]; then
  sed -n '2,23p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
fi
OUT=$1
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
T0=$(date +%s)
BUDGET=${GPU_CHECK_BUDGET_S:-540}
B=${GPU_CHECK_BATCH:-16}
BUILD=build-gpu
SUMMARY="$OUT/summary.md"
: >"$SUMMARY"
left() { echo $((BUDGET - ($(date +%s) - T0))); }
say() { echo "$*" | tee -a "$SUMMARY"; }
# stage NAME SECONDS_NEEDED: false (and a line in the summary) when time is short
stage() {
  local l; l=$(left)
  if [ "$l" -lt "$2" ]; then say "- $1: skipped, ${l} s left of the budget (needs ~$2 s)"; return 1; fi
  echo "== $1 ($l s left)" >&2
}

say "# GPU check $(date -u +%FT%TZ), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
{
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv,noheader 2>&1 | head -4
  nvcc --version 2>&1 | tail -1
  "${CT_PYTHON:-python3}" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' 2>&1 | tail -1
} | sed 's/^/    /' | tee -a "$SUMMARY"

# ---------------------------------------------------------------- libraries
DEPS=${CT_DEPS:-.offline-deps}
if ls "$DEPS"/*.deb >/dev/null 2>&1; then
  eval "$(scripts/offline_deps.sh unpack "$DEPS" /tmp/ctrain-deps 2>>"$OUT/build.log")"
fi
PY=${CT_PYTHON:-$(command -v python3)}

# ---------------------------------------------------------------- 1. build
stage build 60 || exit 1
{
  cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DCT_PYTHON="$PY" \
        ${CT_DEPS_PREFIX:+-DCT_DEPS_PREFIX="$CT_DEPS_PREFIX"} &&
  cmake --build "$BUILD" -j "$(nproc)"
} >>"$OUT/build.log" 2>&1
if [ ! -x "$BUILD/ctrain" ]; then
  say "- build: FAILED (build.log)"; tail -30 "$OUT/build.log" >&2; exit 1
fi
say "- build: ok in $(( $(date +%s) - T0 )) s; warnings: $(grep -c 'warning' "$OUT/build.log")"
"$BUILD/ctrain" hw --no-bench 2>&1 | grep -E '^(gpu|cuda|cpu) ' | sed 's/^/    /' | tee -a "$SUMMARY"
CTRAIN=$ROOT/$BUILD/ctrain

# ------------------------------------------------- 2 and 3. the gpu tests
run_tests() { # name regex seconds
  local name=$1 re=$2 secs=$3
  stage "$name" "$secs" || return 0
  (cd "$BUILD" && CT_GPU_REQUIRED=1 timeout $(( $(left) - 20 )) ctest -L gpu -R "$re" -j 4 \
     --timeout 300 --output-on-failure) >>"$OUT/tests.log" 2>&1
  local res; res=$(grep -E 'tests passed|tests failed' "$OUT/tests.log" | tail -1)
  say "- $name: ${res:-no ctest summary (timed out?)}"
  grep -E '\*\*\*(Failed|Timeout)|Failed +[0-9.]+ sec' "$OUT/tests.log" | grep -E "$re" |
    sed 's/^/    /' | tee -a "$SUMMARY"
}
run_tests kernels 'gpu_test_kernels' 60
run_tests training 'gpu_test_(resume|guard|llama_resume|lora|eval|trace|mpi|gpt2_parity|llama_parity|sft_parity)' 150

# ---------------------------------------------------------------- 4. bench
bench_ctrain() { # precision -> tokens/s and peak device MiB on stdout
  local d; d=$(mktemp -d)
  timeout $(( $(left) - 10 )) "$CTRAIN" train model.preset=gpt2 train.seq_len=1024 \
    train.batch_size="$B" data.train="$DATA" run.device=cuda train.precision="$1" \
    train.steps=10 schedule.warmup_steps=2 run.dir="$d/run" \
    >>"$OUT/bench.log" 2>&1
  "$PY" - "$d/run/metrics.jsonl" <<'EOF'
import json, statistics, sys
try:
    rows = [json.loads(l) for l in open(sys.argv[1]) if '"split": "train"' in l]
except OSError:
    rows = []
tps = [r["tokens_per_s"] for r in rows if r.get("step", 0) > 3]
print("%.0f" % statistics.median(tps) if tps else "failed")
EOF
  rm -rf "$d"
}
bench_torch() { # precision [--compile] -> tokens/s and peak device MiB
  timeout $(( $(left) - 10 )) "$PY" bench/torch_gpt2_step.py --device cuda --seq 1024 \
    --batch "$B" --precision "$1" --attention sdpa --warmup 3 --steps 10 --json "${@:2}" \
    2>>"$OUT/bench.log" | tee -a "$OUT/bench.log" | "$PY" -c '
import json, sys
try:
    d = json.loads(sys.stdin.read().strip().splitlines()[-1])
    print("%.0f tokens/s, peak %.0f MiB" % (d["tokens_per_s"], d["peak_device_bytes"] / 2**20))
except Exception:
    print("failed")'
}
if stage bench 150; then
  DATA=$(mktemp -d)/train.bin
  "$CTRAIN" synth --out "$DATA" --tokens 2000000 --vocab 50257 >>"$OUT/bench.log" 2>&1
  say "- bench: GPT-2 124M, B=$B, T=1024, tokens/s (median of steps 4-10)"
  say "    ctrain fp32: $(bench_ctrain fp32)"
  say "    ctrain bf16: $(bench_ctrain bf16)"
  stage "bench PyTorch bf16 compiled" 90 && say "    PyTorch bf16, compiled, SDPA: $(bench_torch bf16 --compile)"
  stage "bench PyTorch fp32" 40 && say "    PyTorch fp32 (TF32 off), SDPA: $(bench_torch fp32)"
fi

# ---------------------------------------------------------------- 5. sanitize
if ! command -v compute-sanitizer >/dev/null; then
  say "- compute-sanitizer: not on PATH, not run"
elif stage sanitize 60; then
  D=$(mktemp -d)
  "$CTRAIN" synth --out "$D/t.bin" --tokens 20000 --vocab 64 >/dev/null 2>&1
  for tool in memcheck racecheck; do
    stage "sanitize $tool" 30 || break
    timeout $(( $(left) - 5 )) compute-sanitizer --tool "$tool" --error-exitcode 9 "$CTRAIN" train \
      model.preset=gpt2-tiny data.train="$D/t.bin" train.batch_size=2 train.seq_len=16 \
      train.steps=2 run.device=cuda run.dir="$D/$tool" >>"$OUT/sanitizer.log" 2>&1
    rc=$?
    say "- compute-sanitizer $tool: $([ $rc = 0 ] && echo clean || echo "exit $rc (sanitizer.log)")"
  done
fi
say "- total $(( $(date +%s) - T0 )) s"
