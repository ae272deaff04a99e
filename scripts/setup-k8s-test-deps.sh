#!/usr/bin/env bash
# Installs what the Kubernetes manifest test needs (tests/cli/plan-k8s-test.cpp): node and npm, the
# kubernetes-models validators (the Kubernetes OpenAPI schemas), @kubernetes-models/prometheus-operator and
# the yaml parser, pinned by tests/cli/k8s-schema/package-lock.json (node_modules is git-ignored), and
# promtool (Debian's prometheus package, also in setup.sh) for the alert rules. Safe to rerun.
set -euo pipefail
cd "$(dirname "$0")/.."

missing=()
command -v node >/dev/null && command -v npm >/dev/null || missing+=(nodejs npm)
command -v promtool >/dev/null || missing+=(prometheus)
if ((${#missing[@]})); then
  echo "setup-k8s-test-deps: installing ${missing[*]}"
  if [[ $(id -u) -ne 0 ]]; then SUDO=sudo; else SUDO=; fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -q
  $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

bash scripts/npm-ci-pinned.sh tests/cli/k8s-schema setup-k8s-test-deps
