#!/bin/bash
set -euo pipefail
python3 - <<'EOF'
import os, re
d = '/app/backups'
names = sorted(n for n in os.listdir(d) if re.fullmatch(r'backup-\d{4}-\d\d-\d\d\.tar\.gz', n))
keep = set(names[-5:])
month = {}
for n in names:
    month[n[7:14]] = n
keep |= set(month.values())
gone = [n for n in names if n not in keep]
for n in gone:
    os.remove(os.path.join(d, n))
open('/app/deleted.txt', 'w').write(''.join(n + '\n' for n in gone))
EOF
