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

bash scripts/npm-ci-pinned.sh tests/serve/openai-client setup-serve-test-deps
