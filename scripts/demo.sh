#!/usr/bin/env bash
# The main job: plan the 2.8T seed model on a 64-GPU layout, then talk to moxi-tiny, the bundled model
# trained by moxi's own trainer (models/moxi-tiny, recipes/moxi-tiny.json): inspect its checkpoint, chat with
# it, and measure its pass rate per domain on fresh verifiable tasks, its answers checked in the sandbox.
set -euo pipefail
cd "$(dirname "$0")/.."
MOXI=${MOXI_BUILD_DIR:-build}/moxi
OUT=${MOXI_DEMO_DIR:-${TMPDIR:-/tmp}/moxi-demo}
MODEL=models/moxi-tiny
rm -rf "$OUT" && mkdir -p "$OUT"

echo "== The 2.8T seed model planned on 8 nodes x 8 GPUs (TP 8, EP 64), 1M-token context"
"$MOXI" plan --config configs/seed-2.8t.json --tp 8 --ep 64 --pp 1 --nodes 8 --device-memory 141 \
  --context 1048576 --batch 1

echo
echo "== moxi-tiny: the same architecture family at 2.6 M parameters, MXFP4 experts"
report=$("$MOXI" inspect "$MODEL")  # validates every header and tensor against config.json
printf '%s\n' "$report" | sed -n '1,5p'
printf '%s\n' "$report" | tail -n 1

echo
echo "== moxi chat (one question per turn; /reset starts a new conversation)"
printf '%s\n' "How many lines are in notes.txt? Reply with one shell command." /reset \
  "Show the first 2 lines of notes.txt. Reply with one shell command." /reset \
  "Find all files bigger than 1 KB, searching subdirectories too. Reply with one shell command." |
  "$MOXI" chat --model "$MODEL"

echo
echo "== moxi eval: fresh tasks of the training distribution, then the held-out test split"
for split in train test; do
  for domain in terminal code math; do
    "$MOXI" data --domain "$domain" --split "$split" --n 30 --seed 7 --out "$OUT/$split-$domain.jsonl" \
      >/dev/null
  done
  cat "$OUT/$split"-*.jsonl >"$OUT/$split.jsonl"
  if [[ $split == train ]]; then
    echo "-- unseen items of the training templates (the model was trained on seed 1's)"
  else
    echo "-- the held-out test split: templates, parameter ranges and file names never trained on"
  fi
  "$MOXI" eval --model "$MODEL" --tasks "$OUT/$split.jsonl" -q
done
