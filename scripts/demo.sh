#!/usr/bin/env bash
# The main job: plan the 2.8T seed model on a 64-GPU layout, then talk to moxi-small, the bundled model
# trained by moxi's own trainer (models/moxi-small, recipes/moxi-small.json): inspect its checkpoint, chat
# with it, and measure its pass rate per domain on fresh held-out tasks and on prompts written by hand, its
# answers checked in the sandbox.
set -euo pipefail
cd "$(dirname "$0")/.."
MOXI=${MOXI_BUILD_DIR:-build}/moxi
OUT=${MOXI_DEMO_DIR:-${TMPDIR:-/tmp}/moxi-demo}
MODEL=models/moxi-small
rm -rf "$OUT" && mkdir -p "$OUT"

echo "== The 2.8T seed model planned on 8 nodes x 8 GPUs (TP 8, EP 64), 1M-token context"
"$MOXI" plan --config configs/seed-2.8t.json --tp 8 --ep 64 --pp 1 --nodes 8 --device-memory 141 \
  --context 1048576 --batch 1

echo
echo "== moxi-small: the same architecture family at 27 M parameters, MXFP4 experts"
report=$("$MOXI" inspect "$MODEL")  # validates every header and tensor against config.json
printf '%s\n' "$report" | sed -n '1,5p'
printf '%s\n' "$report" | tail -n 1

echo
echo "== moxi chat (typed the way people type; /reset starts a new conversation)"
printf '%s\n' "hello" /reset \
  "hey how many lines are in notes.txt" "and the words?" /reset \
  "whats 48 + 275" /reset \
  "show me the last 3 lines of server.log, just the command" |
  "$MOXI" chat --model "$MODEL"

echo
echo "== moxi eval: the held-out test split (phrasings, templates, names and numbers never trained on)"
for domain in terminal code math chat; do
  "$MOXI" data --domain "$domain" --split test --n 25 --seed 7 --out "$OUT/test-$domain.jsonl" >/dev/null
done
cat "$OUT"/test-*.jsonl >"$OUT/test.jsonl"
"$MOXI" eval --model "$MODEL" --tasks "$OUT/test.jsonl" -q

echo
echo "-- prompts written by hand the way users type them (tasks/user-prompts.jsonl, never trained on)"
"$MOXI" eval --model "$MODEL" --tasks tasks/user-prompts.jsonl -q
