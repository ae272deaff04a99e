#!/bin/bash
set -euo pipefail
cd /app/projects
for p in */; do
  p=${p%/}
  n=$(find "$p" -type f -printf '%s\n' | awk '{s+=$1} END {print s+0}')
  echo "$n $p"
done | sort -k1,1nr -k2,2 > /app/usage.txt
