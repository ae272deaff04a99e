#!/bin/bash
set -euo pipefail
cat > /app/report.py <<'EOF'
import csv
import sys
from decimal import Decimal

totals = {}
with open(sys.argv[1], newline="") as f:
    for row in csv.DictReader(f):
        totals[row["category"]] = totals.get(row["category"], Decimal(0)) + Decimal(row["amount"])
for cat in sorted(totals):
    print("%s: %.2f" % (cat, totals[cat]))
EOF
