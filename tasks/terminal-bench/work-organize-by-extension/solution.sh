#!/bin/bash
set -euo pipefail
mkdir -p /app/sorted
for f in /app/inbox/*; do
  b=$(basename "$f")
  case "$b" in
    *.*) ext=$(printf '%s' "${b##*.}" | tr 'A-Z' 'a-z') ;;
    *) ext=other ;;
  esac
  mkdir -p "/app/sorted/$ext"
  mv -- "$f" "/app/sorted/$ext/$b"
done
