#!/bin/bash
set -euo pipefail
python3 - <<'EOF'
import csv
from decimal import Decimal
tot = {}
with open('/app/sales.csv') as f:
    for r in csv.DictReader(f):
        tot[r['region']] = tot.get(r['region'], Decimal(0)) + int(r['units']) * Decimal(r['unit_price'])
with open('/app/region_totals.csv', 'w') as f:
    f.write('region,revenue\n')
    for k in sorted(tot):
        f.write('%s,%.2f\n' % (k, tot[k]))
EOF
