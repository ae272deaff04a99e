#!/bin/bash
set -euo pipefail
find /app/project -type f -name '*.py' -exec cat {} + | wc -l > /app/py_lines.txt
find /app/project -type f -name '*.py' | wc -l > /app/py_files.txt
