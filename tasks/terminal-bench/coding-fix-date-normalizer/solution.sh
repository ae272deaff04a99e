#!/bin/bash
set -euo pipefail
cat > /app/dates.py <<'EOF'
import datetime


def normalize(s):
    s = s.strip()
    for fmt in ("%Y-%m-%d", "%d/%m/%Y", "%B %d, %Y", "%Y%m%d"):
        try:
            d = datetime.datetime.strptime(s, fmt).date()
        except ValueError:
            continue
        if fmt == "%Y%m%d" and len(s) != 8:
            continue
        if fmt == "%Y-%m-%d" and len(s) != 10:
            continue
        return d.isoformat()
    raise ValueError("unrecognised date: %r" % s)
EOF
