#!/usr/bin/env bash
# apt-install.sh LABEL [PACKAGE...]: installs the Debian packages given (with sudo when not root), saying so
# under LABEL; nothing when none is given. The setup scripts pass the packages whose tools they miss.
set -euo pipefail
label=$1
shift
(($#)) || exit 0
echo "$label: installing $*"
if [[ $(id -u) -ne 0 ]]; then SUDO=sudo; else SUDO=; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "$@"
