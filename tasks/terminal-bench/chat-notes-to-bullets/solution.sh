#!/bin/bash
set -euo pipefail
tr ';' '\n' < /app/notes.txt | sed 's/^ *//; s/ *$//' | grep -v '^$' | sed 's/^/- /' > /app/notes.md
