#!/usr/bin/env bash
# Usage: scripts/npm-ci-pinned.sh DIR NAME: `npm ci` of DIR's package-lock.json unless DIR/node_modules was
# installed from the same lock file (a stamp holds its sha256). NAME is for the messages. Used by the
# setup-*-test-deps.sh scripts; node_modules is git-ignored.
set -euo pipefail
dir=$1 name=$2
stamp=$dir/node_modules/.moxi-stamp
want="$(sha256sum "$dir/package-lock.json" | cut -d' ' -f1)"
if [[ -f $stamp && "$(cat "$stamp")" == "$want" ]]; then
  echo "$name: $dir/node_modules is up to date"
  exit 0
fi
(cd "$dir" && PUPPETEER_SKIP_DOWNLOAD=1 npm ci --no-audit --no-fund --loglevel=error)
echo "$want" > "$stamp"
