#!/bin/bash
set -euo pipefail
cd /app/data && find . -type f -size +1000c | sed 's|^\./||' | LC_ALL=C sort > /app/large_files.txt
