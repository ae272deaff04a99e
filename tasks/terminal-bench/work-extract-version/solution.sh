#!/bin/bash
set -euo pipefail
mkdir -p /app/extracted
tar -xzf /app/toolkit.tar.gz -C /app/extracted
cat /app/extracted/*/VERSION | tr -d '[:space:]' > /app/version.txt
find /app/extracted -type f -name '*.py' | wc -l > /app/py_count.txt
