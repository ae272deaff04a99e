#!/bin/bash
set -euo pipefail
cd /app/files
sha256sum -c /app/SHA256SUMS 2>/dev/null | grep -v ': OK$' | sed 's/: .*//' | sort > /app/bad_files.txt || true
