#!/bin/bash
set -euo pipefail
python3 - <<'EOF'
import csv
from decimal import Decimal
names = {r['id']: r['name'] for r in csv.DictReader(open('/app/customers.csv'))}
tot = {k: Decimal(0) for k in names}; cnt = {k: 0 for k in names}
for r in csv.DictReader(open('/app/orders.csv')):
    tot[r['customer_id']] += Decimal(r['amount']); cnt[r['customer_id']] += 1
with open('/app/customer_totals.csv', 'w', newline='') as f:
    w = csv.writer(f)
    w.writerow(['name', 'total', 'orders'])
    for k in sorted(names, key=lambda k: (-tot[k], names[k])):
        w.writerow([names[k], '%.2f' % tot[k], cnt[k]])
EOF
