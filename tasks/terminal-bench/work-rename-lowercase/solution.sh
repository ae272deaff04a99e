#!/bin/bash
set -euo pipefail
cd /app/photos
for f in *; do
  n=$(printf '%s' "$f" | tr 'A-Z ' 'a-z_')
  [ "$f" = "$n" ] || mv -- "$f" "$n"
done
