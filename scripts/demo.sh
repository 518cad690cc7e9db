#!/usr/bin/env bash
# The demo: raw text to a trained model with ctrain alone. Tokenises the Brown
# corpus (fetched by scripts/bootstrap.sh) with the GPT-2 tokenizer into shards,
# trains a small GPT-2 from scratch on it for a few minutes (train and
# validation loss fall from ln(50257) ~ 10.8), then samples text from it.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -f data/gpt2-tokenizer/vocab.bpe ] || [ ! -d data/brown/text ]; then
  ./scripts/fetch_data.sh
fi
if [ ! -f data/brown/shards/manifest.json ]; then
  build/ctrain prepare --tokenizer data/gpt2-tokenizer --out data/brown/shards \
      --val-tokens 100000 data/brown/text
fi
build/ctrain train --config configs/demo.yaml "$@"
echo "sample from runs/demo:"
build/ctrain sample --model runs/demo --tokenizer data/gpt2-tokenizer \
    --prompt "The jury said" --tokens 48 --top-k 40 --seed 7
echo
