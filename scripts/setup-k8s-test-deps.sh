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
bash scripts/apt-install.sh setup-k8s-test-deps "${missing[@]}"

bash scripts/npm-ci-pinned.sh tests/cli/k8s-schema setup-k8s-test-deps
