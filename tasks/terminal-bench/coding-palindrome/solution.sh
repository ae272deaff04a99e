#!/bin/bash
set -euo pipefail
cat > /app/palindrome.py <<'EOF'
def is_palindrome(s):
    t = [c.lower() for c in s if c.isalnum()]
    return t == t[::-1]
EOF
