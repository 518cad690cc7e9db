#!/bin/sh
# Writes the seed corpora of the fuzz harnesses into tests/fuzz/corpus/NAME/:
# what Python writes by itself (make_corpus.py: tiny safetensors, shards,
# tokenizers, configs, metrics, baselines, cache entries), the seeds the
# harnesses' fixtures write with the library (CT_FUZZ_SEED_OUT: safetensors,
# config.json, the shard index, PEFT configs, checkpoint manifests), a
# prepare output's manifest.json (the remote dataset manifest), and the
# files of a real tiny run (shards from `ctrain synth`, metrics.jsonl, hw.json,
# config.yaml, model.safetensors, bench baselines). Files it names are
# overwritten; other files in the corpus are left alone.
#   tests/fuzz/make_corpus.sh [BUILD_DIR]    (default: build; needs ctrain and
#                                             the fuzz_*_replay programs built)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
build=$(cd "${1:-$repo/build}" && pwd)
out=$here/corpus
ctrain=$build/ctrain
for f in "$ctrain" "$build/tests/fuzz/fuzz_ckpt_replay"; do
  [ -x "$f" ] || { echo "make_corpus: $f is not built (make, or give a build directory)" >&2; exit 2; }
done
tmp=$(mktemp -d /tmp/ctrain_corpus_XXXXXX)
trap 'rm -rf "$tmp"' EXIT INT TERM

/usr/bin/python3 "$here/make_corpus.py" "$out" "$repo"

: > "$tmp/empty"
for h in safetensors hf_config hf_index peft ckpt; do
  mkdir -p "$out/$h"
  CT_FUZZ_SEED_OUT="$out/$h" "$build/tests/fuzz/fuzz_${h}_replay" "$tmp/empty" 2>"$tmp/$h.log" || {
    cat "$tmp/$h.log" >&2
    exit 1
  }
done

# a real tiny run: its shard, metrics, hardware profile, config and weights
"$ctrain" synth --out "$tmp/a.bin" --tokens 512 --vocab 64 --seed 1 >/dev/null 2>&1
"$ctrain" synth --out "$tmp/b.bin" --tokens 200 --vocab 5000 --chain 3 --seed 2 >/dev/null 2>&1
cp "$tmp/a.bin" "$out/shard/synth_512_v64.bin"
cp "$tmp/b.bin" "$out/shard/synth_200_v5000.bin"
"$ctrain" train model.preset=gpt2-tiny data.train="$tmp/a.bin" data.val="$tmp/a.bin" \
  train.batch_size=2 train.seq_len=16 train.steps=8 train.eval_every=4 train.eval_batches=1 \
  run.dir="$tmp/run" run.checkpoint_every=0 run.log_every=1 run.threads=1 >/dev/null 2>&1
run=$tmp/run
cp "$run/config.yaml" "$out/yaml/run_config.yaml"
cp "$run/model.safetensors" "$out/safetensors/run_model.safetensors"
cp "$run/metrics.jsonl" "$out/report/run_metrics.jsonl"
{ cat "$run/metrics.jsonl"; printf '\000'; cat "$run/hw.json"; printf '\000'; cat "$run/config.yaml"; } \
  > "$out/report/run_metrics_hw_config.bin"

# remote dataset manifests: a real prepare output (several shards, a val split), and
# the same with a shard of two 1 MiB blocks (the hashes a remote reader checks)
mkdir -p "$out/manifest"
mkdir -p "$tmp/text"
for i in 1 2 3 4 5 6; do
  printf 'Document %s: the quick brown fox jumps over the lazy dog. %.0s' $i $(seq 1 60) \
    > "$tmp/text/doc$i.txt"
done
"$ctrain" prepare --tokenizer "$repo/data/gpt2-tokenizer" --out "$tmp/prep" --no-cache --quiet \
  --shard-tokens 1000 --val-tokens 500 "$tmp/text" >/dev/null 2>&1
cp "$tmp/prep/manifest.json" "$out/manifest/prepare_small.json"
/usr/bin/python3 - "$tmp/prep/manifest.json" "$out/manifest/two_blocks.json" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
s = m["shards"][0]
s["tokens"] = 600000
s["bytes"] = 1024 + 2 * 600000
s["blocks"] = [s["blocks"][0], "0123456789abcdef"]
m["shards"] = [s]
json.dump(m, open(sys.argv[2], "w"), indent=1)
PY

# SFT sidecars (offsets and loss masks) of a real `prepare --format sft` run
mkdir -p "$out/sft"
/usr/bin/python3 - "$tmp/sft.jsonl" <<'PY'
import json, sys
with open(sys.argv[1], "w") as f:
    for i in range(12):
        f.write(json.dumps({"prompt": "Question %d: what is %d plus %d?" % (i, i, i),
                            "completion": " It is %d." % (2 * i)}) + "\n")
        f.write(json.dumps({"instruction": "Say %d twice" % i, "input": "",
                            "output": "%d %d" % (i, i)}) + "\n")
PY
"$ctrain" prepare --format sft --tokenizer "$repo/data/gpt2-tokenizer" --out "$tmp/sft" \
  --shard-tokens 200 --val-examples 2 "$tmp/sft.jsonl" >/dev/null 2>&1
cp "$tmp/sft/train_000000.sft" "$out/sft/prepare_train0.sft"
cp "$tmp/sft/val_000000.sft" "$out/sft/prepare_val0.sft"

mkdir -p "$out/baseline"
"$ctrain" bench kernels --preset gpt2-tiny --batch 1 --seq 8 --threads 1 --repeat 2 \
  --filter matmul,layernorm,attention --save-baseline "$out/baseline/kernels.json" >/dev/null 2>&1
"$ctrain" bench step --preset gpt2-tiny --batch 1 --seq 8 --threads 1 --steps 1 --repeat 2 \
  --save-baseline "$out/baseline/step.json" >/dev/null 2>&1

echo "make_corpus: $(find "$out" -type f | wc -l) files, $(du -sk "$out" | cut -f1) KiB in $out"
for d in "$out"/*/; do
  printf '  %-12s %3d files %6d bytes\n' "$(basename "$d")" "$(find "$d" -type f | wc -l)" \
    "$(find "$d" -type f -exec cat {} + | wc -c)"
done
