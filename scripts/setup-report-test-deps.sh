#!/usr/bin/env bash
# Installs what the agent-report browser test needs (tests/eval/agent-report-test.cpp): Debian's chromium,
# node and npm, and puppeteer-core (pinned by tests/eval/report-browser/package-lock.json; it drives the
# installed chromium and downloads no browser; node_modules is git-ignored). Safe to rerun.
set -euo pipefail
cd "$(dirname "$0")/.."

missing=()
command -v node >/dev/null && command -v npm >/dev/null || missing+=(nodejs npm)
[[ -x /usr/bin/chromium ]] || missing+=(chromium)
if ((${#missing[@]})); then
  echo "setup-report-test-deps: installing ${missing[*]}"
  if [[ $(id -u) -ne 0 ]]; then SUDO=sudo; else SUDO=; fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -q
  $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

bash scripts/npm-ci-pinned.sh tests/eval/report-browser setup-report-test-deps
