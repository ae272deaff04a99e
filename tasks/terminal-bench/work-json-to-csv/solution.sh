#!/bin/bash
set -euo pipefail
python3 - <<'EOF'
import csv, json
users = sorted(json.load(open('/app/users.json')), key=lambda u: u['id'])
with open('/app/users.csv', 'w', newline='') as f:
    w = csv.writer(f)
    w.writerow(['id', 'name', 'email', 'city'])
    for u in users:
        w.writerow([u['id'], u['name'], u['email'], u['address']['city']])
EOF
