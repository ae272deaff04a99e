#!/usr/bin/env bash
# The main job for now: plan the 2.8T seed model on a 64-GPU layout, then create a tiny random MXFP4
# checkpoint of the same shape, inspect it and generate from it with the CPU forward pass (random weights,
# so the text is noise; the bundled trained model replaces it once it exists).
set -euo pipefail
cd "$(dirname "$0")/.."
MOXI=${MOXI_BUILD_DIR:-build}/moxi
OUT=${MOXI_DEMO_DIR:-${TMPDIR:-/tmp}/moxi-demo}
"$MOXI" plan --config configs/seed-2.8t.json --tp 8 --ep 64 --pp 1 --nodes 8 --device-memory 141 \
  --context 1048576 --batch 1
rm -rf "$OUT"
"$MOXI" init --config configs/tiny-seed.json --out "$OUT/tiny" --seed 1 --shards 2
"$MOXI" inspect "$OUT/tiny"
"$MOXI" generate --model "$OUT/tiny" --prompt "Hello, moxi" --max-tokens 32 --seed 0
