#!/bin/bash
set -euo pipefail
awk '/^[[:space:]]*[#;]/ || /^[[:space:]]*$/ {next}
     /^\[/ {sec=toupper(substr($0, 2, index($0, "]") - 2)); next}
     { i=index($0, "="); k=substr($0, 1, i-1); v=substr($0, i+1)
       gsub(/^[ \t]+|[ \t]+$/, "", k); gsub(/^[ \t]+|[ \t]+$/, "", v)
       print sec "_" toupper(k) "=" v }' /app/config.ini > /app/config.env
