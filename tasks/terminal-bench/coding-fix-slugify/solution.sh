#!/bin/bash
set -euo pipefail
cat > /app/slugify.py <<'EOF'
import re
import unicodedata


def slugify(text):
    t = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    t = re.sub(r"[^a-z0-9]+", "-", t.lower())
    return t.strip("-")
EOF
