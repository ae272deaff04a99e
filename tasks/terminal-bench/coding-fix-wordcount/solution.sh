#!/bin/bash
set -euo pipefail
cat > /app/wordcount.py <<'EOF'
import sys

text = open(sys.argv[1]).read()
print(text.count("\n"), len(text.split()), len(text))
EOF
