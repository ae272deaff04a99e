#!/usr/bin/env bash
# Installs the official openai npm client for the serve integration test (tests/serve/openai-client,
# pinned by its package-lock.json; node_modules is git-ignored). Safe to rerun: skips when node_modules
# matches the lock file.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  echo "setup-serve-test-deps: installing nodejs and npm"
  if [[ $(id -u) -ne 0 ]]; then SUDO=sudo; else SUDO=; fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -q
  $SUDO apt-get install -y -q --no-install-recommends nodejs npm
fi

dir=tests/serve/openai-client
stamp=$dir/node_modules/.moxi-stamp
want="$(sha256sum "$dir/package-lock.json" | cut -d' ' -f1)"
if [[ -f $stamp && "$(cat "$stamp")" == "$want" ]]; then
  echo "setup-serve-test-deps: openai client is up to date"
  exit 0
fi
(cd "$dir" && npm ci --no-audit --no-fund --loglevel=error)
echo "$want" > "$stamp"
