#!/usr/bin/env bash
# Installs what the agent-report browser test needs (tests/eval/agent-report-test.cpp): Debian's chromium,
# node and npm, and puppeteer-core (pinned by tests/eval/report-browser/package-lock.json; it drives the
# installed chromium and downloads no browser; node_modules is git-ignored). Safe to rerun.
set -euo pipefail
cd "$(dirname "$0")/.."

missing=()
command -v node >/dev/null && command -v npm >/dev/null || missing+=(nodejs npm)
[[ -x /usr/bin/chromium ]] || missing+=(chromium)
bash scripts/apt-install.sh setup-report-test-deps "${missing[@]}"

bash scripts/npm-ci-pinned.sh tests/eval/report-browser setup-report-test-deps
