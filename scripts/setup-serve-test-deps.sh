#!/usr/bin/env bash
# Installs the official openai npm client for the serve integration test (tests/serve/openai-client,
# pinned by its package-lock.json; node_modules is git-ignored). Safe to rerun: skips when node_modules
# matches the lock file.
set -euo pipefail
cd "$(dirname "$0")/.."

command -v node >/dev/null && command -v npm >/dev/null || bash scripts/apt-install.sh setup-serve-test-deps nodejs npm

bash scripts/npm-ci-pinned.sh tests/serve/openai-client setup-serve-test-deps
