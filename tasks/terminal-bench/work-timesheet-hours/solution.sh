#!/bin/bash
set -euo pipefail
python3 - <<'EOF'
import csv
tot = {}
for r in csv.DictReader(open('/app/timesheet.csv')):
    s = int(r['start'][:2]) * 60 + int(r['start'][3:])
    e = int(r['end'][:2]) * 60 + int(r['end'][3:])
    if e < s:
        e += 24 * 60
    tot[r['employee']] = tot.get(r['employee'], 0) + e - s
with open('/app/hours.csv', 'w') as f:
    f.write('employee,hours\n')
    for k in sorted(tot):
        f.write('%s,%.2f\n' % (k, tot[k] / 60))
EOF
