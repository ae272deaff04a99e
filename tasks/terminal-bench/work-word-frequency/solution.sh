#!/bin/bash
set -euo pipefail
tr 'A-Z' 'a-z' < /app/book.txt | tr -cs 'a-z' '\n' | grep -v '^$' | sort | uniq -c | awk '{print $2, $1}' | sort -k2,2nr -k1,1 | head -10 > /app/top_words.txt
