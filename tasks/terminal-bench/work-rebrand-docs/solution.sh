#!/bin/bash
set -euo pipefail
cd /app/docs
grep -rl --include='*.md' 'ACME Corp\($\|[^o]\)' . | sed 's|^\./||' | LC_ALL=C sort > /app/changed.txt
while read -r f; do sed -i 's/ACME Corp\($\|[^o]\)/Globex Inc\1/g' "$f"; done < /app/changed.txt
