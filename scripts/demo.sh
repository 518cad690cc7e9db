#!/usr/bin/env bash
# The demo: a small GPT-2 trained from scratch on a synthetic token stream for a
# few minutes, with the loss falling from ln(512) ~ 6.2 towards the stream's
# entropy (~1.1). Then samples a few tokens from the trained model.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p data runs
[ -f data/demo_train.bin ] || build/ctrain synth --out data/demo_train.bin --tokens 2000000 --vocab 512 --seed 1
[ -f data/demo_val.bin ] || build/ctrain synth --out data/demo_val.bin --tokens 100000 --vocab 512 --seed 2
build/ctrain train --config configs/demo.yaml "$@"
echo "sample from runs/demo:"
build/ctrain sample --model runs/demo --tokens 32 --top-k 8 --seed 7
