#!/usr/bin/env bash
# The GPU checks in one command of at most 8.5 minutes, for a GPU machine that
# may be at hand for minutes only and cannot install packages:
#
#   scripts/gpu_check.sh [--stages LIST] [--tests REGEX] [--rerun] OUTDIR
#
# Stages, in this order, each under its own timeout (seconds; a stage also
# stops when the budget, GPU_CHECK_BUDGET_S = 510 from the start, runs out),
# so a stage that hangs is killed and the next one still runs:
#   env       20  the GPU, driver and CUDA, the runtime (gVisor or not), the
#                 Python with PyTorch (CT_PYTHON, else the first python3 that
#                 imports torch), transformers and peft, compute-sanitizer, glibc
#   setup     40  the bundle .gpu-bundle/ctrain-gpu.tar.xz (scripts/gpu_bundle.sh,
#                 made beforehand on a machine with the packages) unpacked and
#                 started; when it does not start or is not there, a build here
#                 (up to 300 s, the libraries from .offline-deps when carried)
#   sync      25  CT_CUDA_SYNC=1 names the kernel that faults (CT_CUDA_FAULT
#                 makes one), and without it the hint says to set it
#   kernels   60  every kernel, forward and backward, fp32, bf16 and fp16 (cuBLAS's
#                 CUDA_R_16F GEMMs, which the trainer runs below 8.0 only), GPT-2 and
#                 LLaMA shapes, held to the ref backend on the GPU; bf16's
#                 tensor-core attention (head sizes 64 and 128, GQA, packed) to
#                 the double formula, required to run on compute capability 8+, in
#                 each implementation (the LLaMA kernel tests again with
#                 CT_CUDA_ATTENTION=mma1 and =wmma); when the default fails
#                 where one of those passes, the later stages (and a later
#                 --stages peers on this machine) run that one, said so in
#                 the summary, so the training and speed figures still come
#   sanitize  80  compute-sanitizer memcheck and racecheck on training steps that
#                 take the tiled attention kernels: GPT-2 at head size 64,
#                 LLaMA with grouped-query attention, bf16 (said so, not failed,
#                 where the sanitizer cannot attach: gVisor)
#   training 160  the training suite with run.device=cuda: PyTorch parity fp32
#                 (GPT-2's also with CT_CUDA_GEMM=cublas, the plain GEMMs, against
#                 the cuBLASLt epilogues' run; whether cuBLASLt ran is reported),
#                 bf16 and dropout (also at head size 64, where bf16 takes the
#                 tensor-core attention), LLaMA, exact resume,
#                 the guard, LoRA, instruction data, eval, trace
#   bench    170  GPT-2 124M, T=1024, batch_size=auto for GPU_CHECK_BATCH (16)
#                 sequences, fp32 and bf16: tokens/s, MFU against the GPU's
#                 peaks, every step's loss (kept), the device memory plan against
#                 the peak the device reports, the time split per kernel from a
#                 trace of two steps; and `ctrain bench kernels --device cuda`: every
#                 kernel at GPT-2 124M's shapes against the GPU's roofline; the bf16
#                 attention's implementations timed one after the other (mma.sync, the
#                 default; CT_CUDA_ATTENTION=mma1, one m16 tile a warp; =wmma); and
#                 ncu (where it reads the counters) on the attention's, the head's
#                 and the MLP's bf16 backward kernels: throughput, occupancy,
#                 registers, cycles per issue
#   hf        90  scripts/hf_check.py: the exports of seven architectures load in
#                 transformers and peft and give ctrain's logits (skipped where
#                 transformers is missing; what the budget leaves, at most)
#   peers    300  only when named (--stages peers): the speed goals side by side on
#                 this GPU, each pair in this one command. GPT-2 124M, T=1024, bf16,
#                 batch GPU_CHECK_PEER_BATCH (16): ctrain against PyTorch compiled
#                 (bench/torch_gpt2_step.py: autocast, SDPA, fused AdamW), tokens/s,
#                 MFU against 989 TFLOP/s and the device peaks; then LoRA on
#                 TinyLlama-1.1B shapes, T=512, bf16 base, batch GPU_CHECK_LORA_BATCH
#                 (4): ctrain against PEFT + SDPA (bench/lora_tinyllama.py --device
#                 cuda), ctrain with train.recompute none, full, and full over
#                 the first 12 of 22 blocks with bf16 activations, tokens/s and
#                 device peaks (bench/lora_gpu.md). Give it a
#                 budget of its own: GPU_CHECK_BUDGET_S=330 ... --stages peers
# OUTDIR gets summary.md, rewritten after every stage (a command killed
# midway still says what passed), a log per stage in logs/ (failures' tails
# only), bench/ (metrics and kernel split) and the rerun command for what
# failed; .gpu-check/ (ignored) keeps the unpacked bundle and what failed, for
# `--rerun` on the same machine. --stages: a comma list of the stages above
# (setup and env always run first, quickly); --tests: only the kernel and
# training tests whose names match REGEX. GPU_CHECK_CAP_<stage>=S overrides a
# stage's timeout; CTRAIN=path skips the bundle (that ctrain, its tests beside
# it). GPU_CHECK_FAKE=stage:hang|fail|pass,... replaces stages, GPU_CHECK_WORK
# moves .gpu-check, GPU_CHECK_DEVICE (cuda) and GPU_CHECK_BENCH_MODEL /
# GPU_CHECK_BENCH_VOCAB (GPT-2 124M) change the runs, GPU_CHECK_KERNELS_ARGS the
# kernel suite's model (--preset gpt2 --seq 1024), GPU_CHECK_PEER_PRESET and
# _SEQ, GPU_CHECK_PEER_TORCH_ARGS and GPU_CHECK_LORA_ARGS the peers' (trying it
# without a GPU).
set -uo pipefail

usage() { sed -n '2,/^set -uo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 2; }

SELF=$(readlink -f "$0")
ROOT=$(cd "$(dirname "$SELF")/.." && pwd)
export ROOT SELF
export PATH="$PATH:/usr/local/cuda/bin"

# ---------------------------------------------------------------- a stage's body
# (run as `gpu_check.sh --body NAME` under the stage's timeout; it writes its
# result line to $WORK/result.NAME and details to $WORK/details.NAME)
if [ "${1:-}" = "--body" ]; then
  NAME=$2
  # shellcheck disable=SC1091
  [ -f "$WORK/env.sh" ] && . "$WORK/env.sh"
  PY=${PY:-$(command -v python3 || echo /usr/bin/python3)}
  HFPY=${HFPY:-$PY}
  CTRAIN=${CTRAIN:-${CTRAIN_GIVEN:-ctrain}}
  # the device and the benchmark's model (other values: trying this script without a GPU)
  DEV=${GPU_CHECK_DEVICE:-cuda}
  BENCH_MODEL=${GPU_CHECK_BENCH_MODEL:-model.preset=gpt2 train.seq_len=1024}
  export BENCH_VOCAB=${GPU_CHECK_BENCH_VOCAB:-50257}
  TESTBIN=${TESTBIN:-$(dirname "$CTRAIN")}
  RES=$WORK/result.$NAME
  DET=$WORK/details.$NAME
  LOG=$OUT/logs/$NAME.log
  : >"$DET"
  result() { echo "$*" >"$RES"; }
  detail() { echo "$*" >>"$DET"; }
  # a test's log, tail only, into the stage's log
  keep_tail() { { echo "---- $1 (last ${3:-60} lines)"; tail -n "${3:-60}" "$2"; } >>"$LOG"; }
  want_test() { [ -z "${TESTS_RE:-}" ] || [[ "$1" =~ $TESTS_RE ]]; }
  # the bf16 attention that passed the kernels stage where the default failed
  # (written there; kept across runs on this machine, so a later --stages
  # peers measures an implementation that computes the right numbers)
  if [ "$NAME" != kernels ] && [ -z "${CT_CUDA_ATTENTION:-}" ] && [ -s "$WORK/attention_fallback" ]; then
    CT_CUDA_ATTENTION=$(cat "$WORK/attention_fallback"); export CT_CUDA_ATTENTION
    case "$NAME" in sanitize|training|bench|peers)
      detail "- CT_CUDA_ATTENTION=$CT_CUDA_ATTENTION: the default bf16 attention failed the kernels stage on this machine and this one passed" ;;
    esac
  fi
  fake=$(echo ",${GPU_CHECK_FAKE:-}," | grep -o ",$NAME:[a-z]*," | tr -d , | cut -d: -f2)
  case "$fake" in
    hang) echo $$ >"$WORK/fake_hang.pid"; result "hanging (fake)"; sleep 86400; exit 0 ;;
    fail) result "FAIL (fake)"; exit 1 ;;
    pass) result "ok (fake)"; exit 0 ;;
  esac
  synth() { # FILE TOKENS VOCAB
    [ -s "$1" ] || "$CTRAIN" synth --out "$1" --tokens "$2" --vocab "$3" >>"$LOG" 2>&1
  }

  body_env() {
    local gpu drv gv py tv
    gpu=$(nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm,mig.mode.current \
            --format=csv,noheader 2>&1 | head -4)
    [ -n "$gpu" ] || gpu="nvidia-smi gave nothing"
    command -v nvidia-smi >/dev/null || gpu="no nvidia-smi on PATH (no GPU driver?)"
    drv=$(nvidia-smi 2>/dev/null | grep -o 'CUDA Version: [0-9.]*' | head -1)
    gv=0
    if dmesg 2>/dev/null | grep -qi gvisor || [ "$(uname -r)" = 4.4.0 ]; then gv=1; fi
    # the Python with PyTorch: CT_PYTHON, else the first candidate that has torch
    # (asked of its import system, not imported: fast)
    has() { "$1" -c "import importlib.util as u, sys; sys.exit(0 if all(u.find_spec(m) for m in sys.argv[1:]) else 1)" "${@:2}" >/dev/null 2>&1; }
    local cands=()
    [ -n "${CT_PYTHON:-}" ] && cands+=("$CT_PYTHON")
    cands+=(python3 /usr/bin/python3 /usr/local/bin/python3 /opt/conda/bin/python3
            /opt/conda/bin/python "${HOME:-/root}"/.venv/bin/python3)
    py=""
    for p in "${cands[@]}"; do
      command -v "$p" >/dev/null 2>&1 && has "$p" torch && { py=$(command -v "$p"); break; }
    done
    tv=$([ -n "$py" ] && timeout 15 "$py" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "gpu", torch.cuda.is_available())' 2>&1 | tail -1)
    # transformers: in that Python, else any candidate (a CPU-only one is enough)
    local hfpy="" hv=""
    for p in "$py" "${cands[@]}"; do
      [ -n "$p" ] && command -v "$p" >/dev/null 2>&1 || continue
      if has "$p" transformers torch; then
        hfpy=$(command -v "$p")
        hv=$("$p" -c 'import importlib.metadata as m
def v(n):
    try: return m.version(n)
    except Exception: return "missing"
print("transformers", v("transformers"), "peft", v("peft"))' 2>&1 | tail -1)
        break
      fi
    done
    local san; san=$(command -v compute-sanitizer || true)
    {
      echo "PY='${py:-/usr/bin/python3}'"
      echo "HFPY='${hfpy:-${py:-/usr/bin/python3}}'"
      echo "GVISOR=$gv"
      echo "SANITIZER='$san'"
    } >>"$WORK/env.sh"
    detail "- GPU: $gpu${drv:+; $drv}"
    detail "- runtime: $([ $gv = 1 ] && echo 'gVisor (compute-sanitizer cannot attach to the GPU here)' || echo "native kernel $(uname -r)")"
    detail "- CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) CPUs, $(grep -m1 -ow 'avx512f' /proc/cpuinfo || echo 'no avx512f'), $(grep -m1 -ow 'avx2' /proc/cpuinfo || echo 'no avx2'); $(ldd --version 2>&1 | head -1)"
    detail "- nvcc: $(nvcc --version 2>/dev/null | tail -2 | head -1 || echo none); compute-sanitizer: ${san:-none}"
    detail "- Python with torch: ${py:-none} (${tv:-no torch}); transformers: ${hfpy:-none} ${hv}"
    if [ -z "$py" ]; then result "ok, but no Python imports torch: the parity tests will fail"; return 0; fi
    result "ok"
  }

  # DIR: 0 the bundle's ctrain starts and sees the GPU; 1 it does not start
  # (glibc, a library, the CPU); 3 it starts but CUDA sees no GPU (a build
  # here would not either: same runtime), the driver's words in $NOGPU
  bundle_start() {
    local j; j=$("$1/bin/ctrain" hw --json --no-bench 2>>"$LOG") || return 1
    echo "$j" | "$PY" -c 'import json,sys; d=json.load(sys.stdin); sys.exit(0 if d.get("cuda_devices",0)>0 else 3)' && return 0
    NOGPU=$(echo "$j" | grep -o '"cuda_error": "[^"]*"' | cut -d'"' -f4)
    return 3
  }

  body_setup() {
    if [ -n "${CTRAIN_GIVEN:-}" ]; then
      if [ ! -x "$CTRAIN_GIVEN" ] || [ -d "$CTRAIN_GIVEN" ]; then
        result "FAIL: CTRAIN=$CTRAIN_GIVEN is not an executable file (unset CTRAIN to use the bundle)"
        return 1
      fi
      echo "CTRAIN='$CTRAIN_GIVEN'; TESTBIN='$(dirname "$CTRAIN_GIVEN")'" >>"$WORK/env.sh"
      [ -d "$(dirname "$CTRAIN_GIVEN")/tests" ] && echo "TESTBIN='$(dirname "$CTRAIN_GIVEN")/tests'" >>"$WORK/env.sh"
      result "ok: CTRAIN=$CTRAIN_GIVEN"
      return 0
    fi
    local tb=$ROOT/.gpu-bundle/ctrain-gpu.tar.xz dir=$WORK/bundle why=""
    if [ -f "$tb" ]; then
      if ! cmp -s "$ROOT/.gpu-bundle/MANIFEST.txt" "$dir/MANIFEST.txt" 2>/dev/null; then
        rm -rf "$dir" && mkdir -p "$dir"
        if command -v xz >/dev/null; then tar -xJf "$tb" -C "$dir" 2>>"$LOG"
        else "$PY" -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "$tb" "$dir" 2>>"$LOG"
        fi || why="cannot unpack $tb"
      fi
      local want have
      want=$(grep -m1 '^source hash:' "$dir/MANIFEST.txt" 2>/dev/null | awk '{print $3}')
      have=$(src_hash)
      local started=1
      if [ -z "$why" ]; then bundle_start "$dir"; started=$?; fi
      if [ $started = 3 ]; then
        result "FAIL: the bundle's ctrain starts, but CUDA sees no GPU: ${NOGPU:-?} (nvidia-smi: see env)"
        return 1
      fi
      if [ $started = 0 ]; then
        echo "CTRAIN='$dir/bin/ctrain'; TESTBIN='$dir/bin'; BUNDLE='$dir'" >>"$WORK/env.sh"
        detail "- bundle: $(grep -m1 '^commit:' "$dir/MANIFEST.txt" | cut -c14-), $(grep -m1 '^glibc:' "$dir/MANIFEST.txt" | cut -c14-)"
        if [ "$want" = "$have" ]; then result "ok: the bundle (built from these sources, $have)"
        else result "ok: the bundle, but built from OTHER sources ($want; this tree: $have): results are the bundle's"
        fi
        return 0
      fi
      [ -n "$why" ] || why="the bundle's ctrain did not start here (logs/setup.log)"
    else
      why="no bundle (.gpu-bundle/ctrain-gpu.tar.xz not carried)"
    fi
    detail "- $why: building here"
    local deps=${CT_DEPS:-$ROOT/.offline-deps}
    if ls "$deps"/*.deb >/dev/null 2>&1; then
      eval "$("$ROOT/scripts/offline_deps.sh" unpack "$deps" "$WORK/deps" 2>>"$LOG")"
    fi
    local b=$ROOT/build-gpu
    { cmake -S "$ROOT" -B "$b" -DCMAKE_BUILD_TYPE=Release -DCT_PYTHON="$PY" -DCT_BENCH=OFF \
        ${CT_DEPS_PREFIX:+-DCT_DEPS_PREFIX="$CT_DEPS_PREFIX"} &&
      cmake --build "$b" -j "$(nproc)" --target ctrain test_kernels test_kernels_bf16 test_kernels_f16 test_kernels_llama
    } >>"$LOG" 2>&1
    if [ ! -x "$b/ctrain" ]; then result "FAIL: $why, and the build failed (logs/setup.log)"; return 1; fi
    echo "CTRAIN='$b/ctrain'; TESTBIN='$b/tests'" >>"$WORK/env.sh"
    result "ok: built here ($why), warnings: $(grep -c warning "$LOG")"
  }

  # A set GEMM peak skips the start-up measurement (an 8192^3 cuBLAS GEMM: under
  # compute-sanitizer that alone would take minutes)
  NOPEAK=alerts.gemm_peak_gflops=1000
  tiny() { # the arguments of a one-step run of a small GPT-2 on the GPU
    echo model.arch=gpt2 model.n_layer=1 model.n_head=2 model.n_embd=128 model.vocab_size=256 \
         model.n_ctx=128 train.batch_size=2 train.seq_len=80 train.steps=1 run.device="$DEV" \
         data.train="$WORK/small.bin" "$NOPEAK"
  }

  body_sync() {
    synth "$WORK/small.bin" 40000 256
    rm -rf "$WORK/sync1" "$WORK/sync2"
    local out=$WORK/sync.err ok=0
    # shellcheck disable=SC2046 # tiny's words are separate arguments
    CT_CUDA_SYNC=1 CT_CUDA_FAULT=layernorm_forward timeout 60 "$CTRAIN" train $(tiny) \
      run.dir="$WORK/sync1" >/dev/null 2>"$out"
    local rc=$?
    cat "$out" >>"$LOG"
    if [ $rc = 2 ] && grep -q 'layernorm_forward: an illegal memory access' "$out"; then
      detail "- CT_CUDA_SYNC=1: $(grep -m1 'error:' "$out" | cut -c1-200)"
      ok=$((ok + 1))
    else detail "- CT_CUDA_SYNC=1 with a fault after layernorm_forward: exit $rc, kernel not named"; fi
    # shellcheck disable=SC2046
    CT_CUDA_FAULT=layernorm_forward timeout 60 "$CTRAIN" train $(tiny) run.dir="$WORK/sync2" \
      >/dev/null 2>"$out"
    rc=$?
    cat "$out" >>"$LOG"
    if [ $rc = 2 ] && grep -q 'CT_CUDA_SYNC=1' "$out"; then ok=$((ok + 1))
    else detail "- without CT_CUDA_SYNC: exit $rc, no hint to set it"; fi
    [ $ok = 2 ] && { result "ok: CT_CUDA_SYNC=1 names the kernel that faults; without it the hint says to set it"; return 0; }
    result "FAIL ($ok of 2; logs/sync.log)"
    return 1
  }

  body_kernels() {
    local pids=() names=() t pass=0 fail=0 failed="" cc
    # bf16 tensor cores (compute capability 8.0 on): the bf16 attention must take them
    cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1)
    if [ "${cc%%.*}" -ge 8 ] 2>/dev/null; then export CT_TEST_TENSOR_CORES=1
    else detail "- compute capability '${cc:-?}': the tensor-core attention is not required"; fi
    for t in test_kernels test_kernels_bf16 test_kernels_f16 test_kernels_llama; do
      want_test "$t" || continue
      local bin=$TESTBIN/$t
      [ -x "$bin" ] || bin=$(dirname "$TESTBIN")/tests/$t
      (cd "$WORK" && CT_TEST_GPU=1 CT_GPU_REQUIRED=1 OMP_NUM_THREADS=4 "$bin" >"$WORK/$t.log" 2>&1) &
      pids+=($!); names+=("$t")
    done
    # the bf16 attention's other implementations (the default is mma.sync with
    # two m16 tiles a warp at head size 64): one tile a warp, and WMMA
    local m
    for m in mma1 wmma; do
      want_test "test_kernels_llama_$m" || continue
      local bin=$TESTBIN/test_kernels_llama
      [ -x "$bin" ] || bin=$(dirname "$TESTBIN")/tests/test_kernels_llama
      (cd "$WORK" && CT_CUDA_ATTENTION=$m CT_TEST_GPU=1 CT_GPU_REQUIRED=1 OMP_NUM_THREADS=4 \
         "$bin" >"$WORK/test_kernels_llama_$m.log" 2>&1) &
      pids+=($!); names+=("test_kernels_llama_$m")
    done
    for i in "${!pids[@]}"; do
      if wait "${pids[$i]}"; then pass=$((pass + 1))
      else fail=$((fail + 1)); failed="$failed ${names[$i]}"; keep_tail "${names[$i]}" "$WORK/${names[$i]}.log"
        local why; why=$(grep -m3 -iE 'fail|error' "$WORK/${names[$i]}.log" | tr '\n' ' ' | cut -c1-300)
        [ -n "$why" ] || why=$(tail -2 "$WORK/${names[$i]}.log" | tr '\n' ' ' | cut -c1-240)
        detail "- FAIL ${names[$i]}: $why"
        echo "${names[$i]}" >>"$WORK/failed_tests"
        # a kernel's fault poisons the rest of the binary and names no kernel:
        # once more with a wait after every launch, which names it
        if grep -qE 'illegal memory access|launch failure|misaligned address|illegal instruction' \
             "$WORK/${names[$i]}.log"; then
          local bn=${names[$i]%_wmma} wm=""
          [ "$bn" != "${names[$i]}" ] && wm=wmma
          [ "${bn%_mma1}" != "$bn" ] && { bn=${bn%_mma1}; wm=mma1; }
          local bin=$TESTBIN/$bn
          [ -x "$bin" ] || bin=$(dirname "$TESTBIN")/tests/$bn
          (cd "$WORK" && CT_CUDA_ATTENTION=${wm:-auto} CT_CUDA_SYNC=1 CT_TEST_GPU=1 CT_GPU_REQUIRED=1 timeout 60 "$bin" \
             >"$WORK/${names[$i]}.sync.log" 2>&1)
          keep_tail "${names[$i]} again with CT_CUDA_SYNC=1" "$WORK/${names[$i]}.sync.log" 30
          detail "  with CT_CUDA_SYNC=1: $(grep -m1 -oE '[a-z_ 0-9]+: an illegal[^(]*|[a-z_ 0-9]+: unspecified launch failure' "$WORK/${names[$i]}.sync.log" || echo 'no kernel named (logs/kernels.log)')"
        fi
      fi
    done
    # the default bf16 attention failed where another implementation passed:
    # the stages after this one run that one, so the GPU run still yields the
    # training suite's and the speed figures (the stage still fails)
    if want_test test_kernels_llama; then
      rm -f "$WORK/attention_fallback"
      if [[ "$failed " == *" test_kernels_llama "* ]]; then
        for m in mma1 wmma; do
          want_test "test_kernels_llama_$m" || continue
          [[ "$failed " == *" test_kernels_llama_$m "* ]] && continue
          echo "$m" >"$WORK/attention_fallback"
          detail "- FALLBACK: the default bf16 attention (mma.sync, two m16 tiles a warp) failed where CT_CUDA_ATTENTION=$m passed; the stages after this one (and a later --stages peers on this machine) run with CT_CUDA_ATTENTION=$m"
          break
        done
      fi
    fi
    # cuBLASLt's check at first use: a line only when it turned an epilogue off
    local lt; lt=$(cat "$WORK"/test_kernels*.log 2>/dev/null | grep -m4 'cuBLASLt' | cut -c1-240)
    detail "- cuBLASLt epilogues: ${lt:-in effect (no fallback line in the kernel tests)}"
    [ $fail = 0 ] && { result "ok: $pass of $pass kernel tests passed on the GPU"; return 0; }
    result "FAIL:$failed ($pass of $((pass + fail)) passed)"
    return 1
  }

  body_sanitize() {
    if [ -z "${SANITIZER:-}" ]; then result "skipped: compute-sanitizer is not on PATH"; return 77; fi
    synth "$WORK/small.bin" 40000 256
    local gpt2="model.arch=gpt2 model.n_layer=1 model.n_head=2 model.n_embd=128"
    local llama="model.arch=llama model.n_layer=1 model.n_head=4 model.n_kv_head=2 model.n_embd=256 model.n_ffn=512"
    local common="model.vocab_size=256 model.n_ctx=128 train.batch_size=2 train.seq_len=80 train.steps=1 run.device=$DEV data.train=$WORK/small.bin $NOPEAK"
    local -A cfgs=([gpt2_hs64]="$gpt2" [llama_gqa_hs64]="$llama" [gpt2_hs64_bf16]="$gpt2 train.precision=bf16")
    local tool c n=0 bad=0 cant=0 lines=""
    for tool in memcheck racecheck; do
      local pids=() names=()
      for c in "${!cfgs[@]}"; do
        want_test "$tool:$c" || continue
        rm -rf "$WORK/san_${tool}_$c"
        ( compute-sanitizer --tool "$tool" --target-processes all --error-exitcode 9 --print-limit 20 \
            "$CTRAIN" train ${cfgs[$c]} $common run.dir="$WORK/san_${tool}_$c" \
            >"$WORK/san_${tool}_$c.log" 2>&1 ) &
        pids+=($!); names+=("$c")
      done
      for i in "${!pids[@]}"; do
        wait "${pids[$i]}"; local rc=$? l=$WORK/san_${tool}_${names[$i]}.log
        n=$((n + 1))
        if [ $rc = 0 ]; then lines="$lines $tool:${names[$i]}=clean"
        elif grep -q 'ERROR SUMMARY: [1-9]' "$l" || [ $rc = 9 ]; then
          bad=$((bad + 1)); lines="$lines $tool:${names[$i]}=ERRORS"; keep_tail "$tool ${names[$i]}" "$l" 80
          detail "- $tool ${names[$i]}: $(grep -m1 'ERROR SUMMARY' "$l") $(grep -m2 -E 'Invalid|Race|Hazard' "$l" | tr '\n' ' ' | cut -c1-240)"
          echo "$tool:${names[$i]}" >>"$WORK/failed_tests"
        else
          cant=$((cant + 1)); lines="$lines $tool:${names[$i]}=did-not-run(exit $rc)"; keep_tail "$tool ${names[$i]}" "$l" 30
        fi
      done
    done
    detail "- runs:$lines"
    if [ $n -gt 0 ] && [ $cant = $n ]; then
      if [ "${GVISOR:-0}" = 1 ]; then result "skipped: compute-sanitizer cannot attach to the GPU under gVisor (logs/sanitize.log)"; return 77; fi
      result "FAIL: compute-sanitizer did not run (logs/sanitize.log)"; return 1
    fi
    [ $bad = 0 ] && [ $cant = 0 ] && { result "ok: $n runs clean (memcheck and racecheck: GPT-2 and bf16 at head size 64, LLaMA grouped-query)"; return 0; }
    result "FAIL: $bad of $n runs with errors, $cant did not run"
    return 1
  }

  body_training() {
    # the longest first (they start first); hs64: at head size 64, the tiled
    # attention's shapes (dropout: its parity part (a), the statistics once)
    local list=(golden/test_dropout_parity hs64:golden/test_gpt2_parity
                hs64:golden/test_llama_parity hs64:golden/test_bf16_parity
                hs64:golden/test_dropout_parity golden/test_gpt2_parity golden/test_llama_parity
                golden/test_bf16_parity golden/test_lora_parity golden/test_sft_parity
                cli/test_resume cli/test_guard cli/test_llama_resume cli/test_lora_resume
                cli/test_lora_setup cli/test_eval cli/test_trace)
    local jobs=${GPU_CHECK_JOBS:-6} running=0 t
    mkdir -p "$WORK/tests"
    : >"$WORK/tests/results"
    for t in "${list[@]}"; do
      local file=${t#hs*:} hs="" parts=""
      [[ "$t" == hs*:* ]] && { hs=${t%%:*}; hs=${hs#hs}; parts=a; }
      local name; name=gpu_$(basename "$file")${hs:+_hs$hs}
      want_test "$name" || continue
      (
        cd "$WORK/tests" && CT_GPU_REQUIRED=1 CT_PARITY_HEAD_SIZE=$hs CT_DROPOUT_PARTS=$parts \
          "$PY" "$ROOT/tests/gpu/on_gpu.py" "$CTRAIN" "$ROOT/tests/$file.py" >"$name.log" 2>&1
        echo "$name $?" >>"$WORK/tests/results"
      ) &
      running=$((running + 1))
      if [ $running -ge "$jobs" ]; then wait -n; running=$((running - 1)); fi
    done
    wait
    local pass=0 fail=0 skip=0 failed=""
    while read -r name rc; do
      case $rc in
        0) pass=$((pass + 1)) ;;
        77) skip=$((skip + 1)); detail "- skipped $name: $(tail -1 "$WORK/tests/$name.log")" ;;
        *) fail=$((fail + 1)); failed="$failed $name"; echo "$name" >>"$WORK/failed_tests"
           keep_tail "$name" "$WORK/tests/$name.log"
           local why; why=$(grep -m3 '^FAIL' "$WORK/tests/$name.log" | cut -c1-200 | tr '\n' ' ')
           [ -n "$why" ] || why=$(grep -v '^[[:space:]]*$' "$WORK/tests/$name.log" | tail -1 | cut -c1-240)
           detail "- FAIL $name (exit $rc): $why"
           if grep -qE 'illegal memory access|launch failure|misaligned address' "$WORK/tests/$name.log"; then
             detail "  a kernel faulted: CT_CUDA_SYNC=1 scripts/gpu_check.sh --stages training --tests '^$name\$' \"\$OUT\" names it"
           fi ;;
      esac
    done <"$WORK/tests/results"
    local lt; lt=$(cat "$WORK"/tests/gpu_test_gpt2_parity*.log 2>/dev/null | grep -m2 "run1's cuBLASLt" | cut -c1-240)
    [ -n "$lt" ] && detail "- GPT-2 parity: $lt (run9 compares CT_CUDA_GEMM=cublas)"
    [ $fail = 0 ] && { result "ok: $pass passed$([ $skip -gt 0 ] && echo ", $skip skipped")"; return 0; }
    result "FAIL:$failed ($pass passed, $skip skipped)"
    return 1
  }

  bench_one() { # PRECISION: a short GPT-2 124M run, its losses, speed, memory and kernel split
    local p=$1 d=$WORK/bench_$1
    rm -rf "$d"
    # shellcheck disable=SC2086 # the model's settings are separate words
    timeout $(( ${STAGE_LEFT:-80} / 2 )) "$CTRAIN" train $BENCH_MODEL \
      train.batch_size=auto train.effective_batch="${GPU_CHECK_BATCH:-16}" data.train="$WORK/bench.bin" \
      run.device="$DEV" train.precision="$p" train.steps=8 schedule.warmup_steps=2 \
      run.trace=steps:6-7 run.dir="$d" >>"$LOG" 2>&1
    local rc=$?
    mkdir -p "$OUT/bench"
    [ -f "$d/metrics.jsonl" ] && cp "$d/metrics.jsonl" "$OUT/bench/${p}_metrics.jsonl"
    "$PY" - "$d" "$p" "$OUT/bench/kernels_$p.md" "$rc" <<'EOF' >>"$DET"
import json, math, os, statistics, sys
d, p, md, rc = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
rows = []
try:
    rows = [json.loads(l) for l in open(os.path.join(d, "metrics.jsonl"))]
except OSError:
    pass
tr = [r for r in rows if r.get("split") == "train"]
dev = [r for r in rows if r.get("split") == "device"]
if not tr:
    print("- %s: FAIL: no training steps (exit %d; logs/bench.log)" % (p, rc))
    sys.exit(1)
losses = [r["loss"] for r in tr]
late = [r for r in tr if r["step"] >= 3] or tr
tps = statistics.median(r["tokens_per_s"] for r in late)
mfu = statistics.median(r.get("mfu", float("nan")) for r in late)
mfut = statistics.median(r.get("mfu_theory", float("nan")) for r in late)
ok = all(math.isfinite(x) for x in losses) and abs(losses[0] - math.log(int(os.environ["BENCH_VOCAB"]))) < 1.0 and losses[-1] < losses[0]
print("- %s: %s %.0f tokens/s, MFU %.1f%% of the measured GEMM peak, %.1f%% of theory; losses %s"
      % (p, "ok" if ok and rc == 0 else "FAIL", tps, 100 * mfu, 100 * mfut,
         " ".join("%.3f" % x for x in losses)))
if dev:
    last = dev[-1]
    peak, plan = last["device_peak_bytes"], last["device_plan_bytes"]
    print("  device memory: plan %.0f MiB, peak the device reports %.0f MiB (plan %+.1f%%), limit %.0f MiB"
          % (plan / 2**20, peak / 2**20, 100 * (plan / peak - 1) if peak else float("nan"),
             last["device_limit_bytes"] / 2**20))
    hw = [r["host_waits"] for r in dev if "host_waits" in r]
    if hw:  # the step's waits for the GPU: 1 is the ideal, traced steps too
        print("  host waits per step: %s" % " ".join("%d" % x for x in hw))
    g = [r for r in dev if "gpu_util" in r]
    if g:  # the NVML watch: its last reading (null where the board reports none)
        print("  NVML: %d readings; last: util %s%%, memory %s of %s MiB, %s W, %s C, SM %s MHz"
              % (len(g), *(g[-1].get(k) for k in ("gpu_util", "gpu_mem_used_mib",
                 "gpu_mem_total_mib", "gpu_power_w", "gpu_temp_c", "gpu_sm_clock_mhz"))))
    else:
        print("  NVML: no GPU readings in metrics.jsonl (the watch was off: see logs/bench.log)")
try:
    ev = json.load(open(os.path.join(d, "trace.json")))
    ev = ev["traceEvents"] if isinstance(ev, dict) else ev
    steps = [e for e in ev if e.get("cat") == "train" and e.get("name") == "step"]
    per = {}
    for e in ev:
        if e.get("cat") == "kernel":
            per[e["name"]] = per.get(e["name"], 0.0) + e.get("dur", 0.0)
    n = max(1, len(steps))
    step_ms = sum(e["dur"] for e in steps) / n / 1e3
    tot = sum(per.values()) / n / 1e3
    with open(md, "w") as f:
        f.write("# %s: time per step by kernel (trace of %d steps; step %.1f ms, kernels %.1f ms)\n\n"
                "| kernel | ms/step | share of the step |\n|---|---|---|\n" % (p, n, step_ms, tot))
        for k, v in sorted(per.items(), key=lambda kv: -kv[1]):
            f.write("| %s | %.2f | %.1f%% |\n" % (k, v / n / 1e3, 100 * v / n / 1e3 / step_ms))
    top = sorted(per.items(), key=lambda kv: -kv[1])[:5]
    print("  kernels (of %.0f ms/step): %s (bench/kernels_%s.md)"
          % (step_ms, ", ".join("%s %.1f" % (k, v / n / 1e3) for k, v in top), p))
except (OSError, ValueError, KeyError, ZeroDivisionError) as e:
    print("  no kernel split: %s" % e)
sys.exit(0 if ok and rc == 0 else 1)
EOF
  }

  bench_kernels() { # every kernel at GPT-2 124M's shapes against the GPU's roofline
    local j=$WORK/kernels_device.json
    # shellcheck disable=SC2086 # the model's settings are separate words
    timeout $(( ${STAGE_LEFT:-120} / 4 )) "$CTRAIN" bench kernels --device "$DEV" --repeat 1 \
      --batch "${GPU_CHECK_BATCH:-16}" --reps 2 --json \
      ${GPU_CHECK_KERNELS_ARGS:---preset gpt2 --seq 1024} >"$j" 2>>"$LOG"
    local rc=$?
    cat "$j" >>"$LOG"
    "$PY" - "$j" "$rc" <<'EOF' >>"$DET"
import json, sys
j, rc = sys.argv[1], int(sys.argv[2])
try:
    k = json.load(open(j))
except (OSError, ValueError) as e:
    print("- kernels --device: FAIL (exit %d: %s; logs/bench.log)" % (rc, e))
    sys.exit(1)
its = k.get("items", [])
print("- kernels --device (%s, %s B=%s T=%s): %d kernels; peaks %.0f GFLOP/s fp32, %.0f bf16; "
      "the slowest, against their roofline:" % (k.get("device"), k.get("preset"), k.get("B"),
      k.get("T"), len(its), k.get("gemm_peak_gflops", 0), k.get("gemm_bf16_peak_gflops", 0)))
for it in sorted(its, key=lambda it: -it["seconds"])[:14]:
    print("  %-30s %-28s %8.3f ms %9.1f %-7s %5.1f%% of %s" % (
        it["name"], it["shape"], it["seconds"] * 1e3, it["rate"], it["unit"],
        100 * it.get("of_roofline", 0), it.get("bound", "?")))
sys.exit(0 if rc == 0 and its else 1)
EOF
  }

  bench_attention_ab() { # the bf16 attention's implementations, one after the other
    local m
    for m in auto mma1 wmma; do
      # shellcheck disable=SC2086 # the model's settings are separate words
      CT_CUDA_ATTENTION=$m timeout $(( ${STAGE_LEFT:-120} / 10 )) "$CTRAIN" bench kernels \
        --device "$DEV" --no-roofline --repeat 1 --batch "${GPU_CHECK_BATCH:-16}" --reps 3 --json \
        --filter attention_bf16 ${GPU_CHECK_KERNELS_ARGS:---preset gpt2 --seq 1024} \
        >"$WORK/attention_$m.json" 2>>"$LOG"
      echo "attention_bf16 CT_CUDA_ATTENTION=$m: exit $?" >>"$LOG"
    done
    "$PY" - "$WORK"/attention_{auto,mma1,wmma}.json <<'EOF' >>"$DET"
import json, sys
t = []
for f in sys.argv[1:]:
    try:
        t.append({it["name"]: it["seconds"] for it in json.load(open(f)).get("items", [])})
    except (OSError, ValueError, KeyError):
        t.append({})
names = sorted(set(t[0]) & set(t[2]))
if not names:
    print("- attention_bf16 implementations: no timings (logs/bench.log)")
    sys.exit(0)
ms = lambda d, n: "%.3f ms" % (d[n] * 1e3) if n in d else "-"
print("- attention_bf16, ms (x the WMMA kernels' speed): " + "; ".join(
    "%s: mma.sync %s (%.2fx), one m16 tile a warp (mma1) %s, WMMA %s" % (
        n, ms(t[0], n), t[2][n] / t[0][n] if t[0][n] > 0 else float("nan"), ms(t[1], n),
        ms(t[2], n)) for n in names))
EOF
  }

  bench_profile() { # ncu on the bf16 step's slowest kernels: the attention's, the head's, the MLP's
    local ncu
    local c
    ncu=$(command -v ncu)
    for c in /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu; do
      [ -n "$ncu" ] || { [ -x "$c" ] && ncu=$c; }
    done
    if [ -z "$ncu" ]; then detail "- profile: skipped: no ncu on this machine"; return 0; fi
    local filters=(attention_bf16.fwd attention_bf16.bwd gemm_bf16.head16.fwd gemm_bf16.head16.bwd_input gemm_bf16.fc.bwd)
    local regexes=('k_f[am]_fwd' 'k_attn_D|k_f[am]_dq|k_f[am]_dkv' '.' '.' '.')
    local counts=(1 3 4 3 4) i
    : >"$WORK/ncu.csv"
    for i in "${!filters[@]}"; do
      # shellcheck disable=SC2086 # the model's settings are separate words
      timeout $(( ${STAGE_LEFT:-150} / 8 )) "$ncu" --clock-control none -k "regex:${regexes[$i]}" \
        -c "${counts[$i]}" --section SpeedOfLight --section Occupancy --section LaunchStats \
        --section WarpStateStats --csv --page details \
        "$CTRAIN" bench kernels --device "$DEV" --no-roofline --repeat 1 --filter "${filters[$i]}" \
        --batch "${GPU_CHECK_BATCH:-16}" ${GPU_CHECK_KERNELS_ARGS:---preset gpt2 --seq 1024} \
        >"$WORK/ncu_$i.out" 2>>"$LOG"
      echo "ncu ${filters[$i]}: exit $?" >>"$LOG"
      grep '^"' "$WORK/ncu_$i.out" | sed "s/^/${filters[$i]},/" >>"$WORK/ncu.csv"
      grep -v '^"' "$WORK/ncu_$i.out" | tail -5 >>"$LOG"
    done
    cat "$WORK/ncu.csv" >>"$LOG"
    "$PY" - "$WORK/ncu.csv" <<'EOF' >>"$DET"
import csv, io, sys
want = ["Duration", "Compute (SM) Throughput", "Memory Throughput", "Registers Per Thread",
        "Achieved Occupancy", "Theoretical Occupancy", "Warp Cycles Per Issued Instruction",
        "Block Limit Registers", "Block Limit Shared Mem"]
short = {"Compute (SM) Throughput": "SM", "Memory Throughput": "mem",
         "Registers Per Thread": "regs", "Achieved Occupancy": "occ",
         "Theoretical Occupancy": "occ max", "Warp Cycles Per Issued Instruction": "cyc/issue",
         "Block Limit Registers": "blocks by regs", "Block Limit Shared Mem": "blocks by smem"}
kern, order = {}, []
header = None
for line in open(sys.argv[1]):
    bench, _, rest = line.partition(",")
    row = next(csv.reader(io.StringIO(rest)))
    if row and row[0] == "ID":
        header = row
        continue
    if not header or len(row) != len(header):
        continue
    r = dict(zip(header, row))
    key = (bench, r["ID"])
    if key not in kern:
        kern[key] = {"bench": bench, "name": r.get("Kernel Name", "?"), "m": {}}
        order.append(key)
    if r.get("Metric Name") in want:
        kern[key]["m"][r["Metric Name"]] = (r.get("Metric Value", ""), r.get("Metric Unit", ""))
if not order:
    print("- profile: no ncu rows (logs/bench.log says why: the counters may be refused here)")
    sys.exit(0)
print("- profile (ncu --clock-control none, one launch each; logs/bench.log has every row):")
for key in order:
    k = kern[key]
    name = k["name"].split("(")[0].replace("void ", "")[:60]
    parts = []
    for w in want:
        if w in k["m"]:
            v, u = k["m"][w]
            parts.append("%s %s%s" % (short.get(w, w.lower()), v, "" if u in ("", "register/thread", "block", "inst", "cycle") else " " + u))
    print("  %s / %s: %s" % (k["bench"], name, ", ".join(parts)))
EOF
  }

  body_bench() {
    synth "$WORK/bench.bin" 2000000 "$BENCH_VOCAB"
    local ok=0
    bench_one fp32 && ok=$((ok + 1))
    bench_one bf16 && ok=$((ok + 1))
    bench_kernels && ok=$((ok + 1))
    bench_attention_ab
    bench_profile
    [ $ok = 3 ] && { result "ok: fp32 and bf16, and the kernels against the roofline (bench/)"; return 0; }
    result "FAIL: $((3 - ok)) of 3 (two runs, the kernel suite) failed or gave a wrong loss (details, logs/bench.log)"
    return 1
  }

  body_peers() {
    local B=${GPU_CHECK_PEER_BATCH:-16} d=$WORK/peer_ctrain tj=$WORK/peer_torch.json ok=0
    local t0; t0=$(date +%s)
    mkdir -p "$OUT/bench"
    synth "$WORK/bench.bin" 2000000 "$BENCH_VOCAB"
    rm -rf "$d" "$tj"
    # shellcheck disable=SC2086 # the model's settings are separate words
    timeout $(( ${STAGE_LEFT:-300} / 4 )) "$CTRAIN" train $BENCH_MODEL train.batch_size="$B" \
      data.train="$WORK/bench.bin" run.device="$DEV" train.precision=bf16 train.steps=10 \
      schedule.warmup_steps=2 run.checkpoint_every=0 run.dir="$d" >>"$LOG" 2>&1
    # shellcheck disable=SC2086 # the options are separate words
    timeout $(( ${STAGE_LEFT:-300} / 3 )) "$PY" "$ROOT/bench/torch_gpt2_step.py" \
      --preset "${GPU_CHECK_PEER_PRESET:-gpt2}" --batch "$B" --seq "${GPU_CHECK_PEER_SEQ:-1024}" \
      --precision bf16 --warmup 3 --steps 6 --json \
      ${GPU_CHECK_PEER_TORCH_ARGS:---device cuda --compile --attention sdpa} >"$tj" 2>>"$LOG"
    "$PY" - "$d" "$tj" "$OUT/bench/peers_gpt2.json" <<'EOF' >>"$DET" && ok=$((ok + 1))
import json, os, statistics, sys
d, tj, out = sys.argv[1:4]
try:
    rows = [json.loads(l) for l in open(os.path.join(d, "metrics.jsonl"))]
except OSError:
    rows = []
tr = [r for r in rows if r.get("split") == "train"]
peaks = [r["device_peak_bytes"] for r in rows
         if r.get("split") == "device" and "device_peak_bytes" in r]
try:
    t = json.loads(open(tj).read().strip().splitlines()[-1])
except (OSError, ValueError, IndexError):
    t = {}
if not tr or "tokens_per_s" not in t:
    print("- GPT-2: FAIL: %s (logs/peers.log)"
          % ("no ctrain steps" if not tr else "no PyTorch result"))
    sys.exit(1)
late = [r for r in tr if r["step"] >= 3] or tr
c_tps, t_tps = statistics.median(r["tokens_per_s"] for r in late), t["tokens_per_s"]
cfg = t.get("config", {})
L, C, V = cfg.get("layers", 12), cfg.get("embd", 768), cfg.get("vocab", 50257)
T = t.get("T", 1024)
# nanoGPT's count per token: 6 N (N: the 12 L C^2 of the blocks and the tied head) and
# attention's 12 L C T (forward and backward), halved for the causal mask
fpt = 6 * (12 * L * C * C + V * C) + 6 * L * C * T
mfu = lambda tps: 100.0 * tps * fpt / 989e12
res = {"ctrain_tokens_per_s": c_tps, "torch_tokens_per_s": t_tps, "ratio": c_tps / t_tps,
       "ctrain_mfu_989": mfu(c_tps), "torch_mfu_989": mfu(t_tps),
       "ctrain_device_peak": max(peaks) if peaks else None,
       "torch_device_peak": t.get("peak_device_bytes"), "B": t.get("B"), "T": T,
       "torch": t.get("torch"), "gpu": t.get("gpu"), "compile": t.get("compile"),
       "ctrain_losses": [r["loss"] for r in tr], "torch_losses": t.get("loss")}
with open(out, "w") as f:
    json.dump(res, f, indent=2)
print("- GPT-2 B=%s T=%d bf16 on %s: ctrain %.0f tokens/s (MFU %.1f%% of 989 TFLOP/s), "
      "PyTorch %s%s %.0f (%.1f%%): %s %.2fx (goal 1.1x)"
      % (t.get("B"), T, t.get("gpu", "?"), c_tps, mfu(c_tps), t.get("torch", "?"),
         " compiled" if t.get("compile") else "", t_tps, mfu(t_tps),
         "PASS" if res["ratio"] >= 1.1 else "MISS", res["ratio"]))
if peaks and t.get("peak_device_bytes"):
    print("  device peak: ctrain %.0f MiB, PyTorch %.0f MiB"
          % (max(peaks) / 2**20, t["peak_device_bytes"] / 2**20))
EOF
    # the LoRA pair gets what the GPT-2 pair left of the stage (at least 2/5 of
    # it): three ctrain runs (recompute none, full, full:12+bf16) and PEFT's
    local lora_left=$(( ${STAGE_LEFT:-300} - ($(date +%s) - t0) - 5 ))
    [ "$lora_left" -lt $(( ${STAGE_LEFT:-300} * 2 / 5 )) ] && lora_left=$(( ${STAGE_LEFT:-300} * 2 / 5 ))
    # shellcheck disable=SC2086 # the options are separate words
    timeout "$lora_left" "$HFPY" "$ROOT/bench/lora_tinyllama.py" \
      --ctrain "$CTRAIN" --workdir "$WORK/lora" --markdown "$OUT/bench/lora_gpu.md" \
      --json-out "$OUT/bench/lora_gpu.json" \
      ${GPU_CHECK_LORA_ARGS:---device cuda --batch ${GPU_CHECK_LORA_BATCH:-4} --seq 512 --steps 4 --recompute none,full,full:12+bf16} \
      >"$WORK/lora.log" 2>&1
    local lrc=$?
    cat "$WORK/lora.log" >>"$LOG"
    if [ $lrc = 0 ]; then
      ok=$((ok + 1))
      grep -E '^(PASS|MISS|\| ratio)' "$WORK/lora.log" | sed 's/^/- LoRA: /' >>"$DET"
    else
      detail "- LoRA: FAIL (exit $lrc; logs/peers.log)"
    fi
    [ $ok = 2 ] && { result "ok: both pairs measured (bench/peers_gpt2.json, bench/lora_gpu.md)"; return 0; }
    result "FAIL: $((2 - ok)) of 2 pairs not measured (details, logs/peers.log)"
    return 1
  }

  body_hf() {
    "$HFPY" "$ROOT/scripts/hf_check.py" "$CTRAIN" "$WORK/hf" --device "$DEV" >"$WORK/hf.log" 2>&1
    local rc=$?
    grep -E '^(PASS|FAIL|SKIP)' "$WORK/hf.log" | cut -c1-200 | sed 's/^/- /' >>"$DET"
    case $rc in
      0) result "ok: $(grep -c '^PASS' "$WORK/hf.log") checks passed"; return 0 ;;
      77) result "skipped: transformers not installed ($HFPY)"; return 77 ;;
      *) keep_tail hf "$WORK/hf.log" 80; result "FAIL (exit $rc; logs/hf.log)"; return 1 ;;
    esac
  }

  src_hash() { # as scripts/gpu_bundle.sh computes it
    (cd "$ROOT" && find src include cli tests/kernels tests/gpu CMakeLists.txt tests/CMakeLists.txt \
       -type f \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' -o -name '*.cpp' \
       -o -name CMakeLists.txt \) -print0 | LC_ALL=C sort -z | xargs -0 sha256sum |
       sha256sum | cut -c1-16)
  }

  "body_$NAME"
  exit $?
fi

# ---------------------------------------------------------------- the driver
STAGES_ALL=(env setup sync kernels sanitize training bench hf peers)
declare -A CAP=([env]=20 [setup]=40 [sync]=25 [kernels]=60 [sanitize]=80 [training]=160 [bench]=170 [hf]=90 [peers]=300)
ONLY="" TESTS_RE="" RERUN=0
while [ $# -gt 0 ]; do
  case "$1" in
    --stages) ONLY=$2; shift 2 ;;
    --tests) TESTS_RE=$2; shift 2 ;;
    --rerun) RERUN=1; shift ;;
    -h|--help) usage ;;
    -*) echo "gpu_check: unknown option $1" >&2; usage ;;
    *) break ;;
  esac
done
[ $# -eq 1 ] || usage
OUT=$1
mkdir -p "$OUT/logs"
OUT=$(cd "$OUT" && pwd)
WORK=${GPU_CHECK_WORK:-$ROOT/.gpu-check}
mkdir -p "$WORK"
WORK=$(cd "$WORK" && pwd)
if [ $RERUN = 1 ] && [ -f "$WORK/last_failed" ]; then
  # shellcheck disable=SC1091
  . "$WORK/last_failed" # ONLY=... TESTS_RE=...
elif [ $RERUN = 1 ]; then
  echo "gpu_check: --rerun: no earlier check on this machine ($WORK/last_failed): running every stage" >&2
fi
rm -f "$WORK"/result.* "$WORK"/details.* "$WORK/failed_tests" "$WORK/fake_hang.pid"
: >"$WORK/env.sh"
CTRAIN_GIVEN=${CTRAIN:-}
export OUT WORK TESTS_RE CTRAIN_GIVEN GPU_CHECK_FAKE="${GPU_CHECK_FAKE:-}"
T0=$(date +%s)
BUDGET=${GPU_CHECK_BUDGET_S:-510}
declare -A STATUS SECS
now() { echo $(( $(date +%s) - T0 )); }
# every stage but peers when none are named; peers only when named
want() {
  if [ "$1" = env ] || [ "$1" = setup ] || [[ ",$ONLY," == *",$1,"* ]]; then return 0; fi
  [ -z "$ONLY" ] && [ "$1" != peers ]
}

write_summary() {
  local tmp=$OUT/.summary.md.tmp s
  {
    echo "# GPU check, $(date -u +%FT%TZ)"
    echo
    echo "budget ${BUDGET} s, $(now) s used; stages: ${ONLY:-all}${TESTS_RE:+; tests matching '$TESTS_RE'}"
    echo
    echo "| stage | seconds | result |"
    echo "|---|---|---|"
    for s in "${STAGES_ALL[@]}"; do
      [ -n "${STATUS[$s]:-}" ] || continue
      echo "| $s | ${SECS[$s]:-} | ${STATUS[$s]} |"
    done
    for s in "${STAGES_ALL[@]}"; do
      [ -s "$WORK/details.$s" ] || continue
      echo
      echo "$s:"
      head -40 "$WORK/details.$s"
    done
    local failed_stages="" st
    for s in "${STAGES_ALL[@]}"; do
      st=${STATUS[$s]:-}
      case "$st" in FAIL*|TIMEOUT*|*"s left of the budget"|"not run"*) failed_stages="$failed_stages,$s" ;; esac
    done
    failed_stages=${failed_stages#,}
    if [ -n "$failed_stages" ]; then
      local tre=""
      [ -s "$WORK/failed_tests" ] && tre="^($(sort -u "$WORK/failed_tests" | paste -sd'|'))\$"
      echo
      echo "rerun what failed (same machine, or carry the same paths):"
      echo
      echo "    scripts/gpu_check.sh --stages $failed_stages${tre:+ --tests '$tre'} \"\$OUT\""
      echo
      echo "(on the same machine, while it is still warm: scripts/gpu_check.sh --rerun \"\$OUT\")"
      { echo "ONLY='$failed_stages'"; echo "TESTS_RE='$tre'"; } >"$WORK/last_failed"
    elif [ -z "${RUNNING:-}" ]; then
      rm -f "$WORK/last_failed"
    fi
  } >"$tmp"
  mv -f "$tmp" "$OUT/summary.md"
}

for s in "${STAGES_ALL[@]}"; do
  want "$s" || continue
  left=$(( BUDGET - $(now) - 3 ))
  capvar=GPU_CHECK_CAP_$s
  cap=${!capvar:-${CAP[$s]}}
  [ "$s" = setup ] && [ -z "$CTRAIN_GIVEN" ] && [ ! -f "$ROOT/.gpu-bundle/ctrain-gpu.tar.xz" ] && cap=${!capvar:-300}
  if [ "$left" -lt 5 ]; then
    STATUS[$s]="skipped: ${left} s left of the budget"
    write_summary
    continue
  fi
  t=$(( cap < left ? cap : left ))
  RUNNING=1
  STATUS[$s]="running (timeout ${t} s, started at $(now) s)"
  write_summary
  start=$(date +%s)
  STAGE_LEFT=$t timeout -k 5 "$t" "$SELF" --body "$s" >>"$OUT/logs/$s.log" 2>&1
  rc=$?
  SECS[$s]=$(( $(date +%s) - start ))
  res=$(cat "$WORK/result.$s" 2>/dev/null)
  case $rc in
    0|77) STATUS[$s]=${res:-ok} ;;
    124|137) STATUS[$s]="TIMEOUT: killed after ${t} s${res:+ (it had said: $res)}" ;;
    *) STATUS[$s]=${res:-FAIL (exit $rc)}; [[ "${STATUS[$s]}" == FAIL* ]] || STATUS[$s]="FAIL (exit $rc): ${STATUS[$s]}" ;;
  esac
  unset RUNNING
  write_summary
  # a hung setup leaves nothing to run the rest with
  if [ "$s" = setup ] && [ $rc != 0 ]; then
    for r in "${STAGES_ALL[@]}"; do
      case $r in env|setup) ;; *) want "$r" && STATUS[$r]="not run: setup failed" ;; esac
    done
    write_summary
    break
  fi
  # keep what comes back small: a stage's log to its last 256 KiB
  f=$OUT/logs/$s.log
  if [ -f "$f" ] && [ "$(stat -c %s "$f")" -gt 262144 ]; then
    tail -c 262144 "$f" >"$f.tmp" && mv -f "$f.tmp" "$f"
  fi
done
echo "gpu_check: $(now) s; $OUT/summary.md:" >&2
cat "$OUT/summary.md" >&2
grep -qE '\| (FAIL|TIMEOUT)' "$OUT/summary.md" && exit 1
exit 0
