#!/bin/bash
set -euo pipefail
python3 - <<'EOF'
import json
p = '/app/settings.json'
s = json.load(open(p))
s['database']['host'] = 'db.internal'
s['database']['pool']['max'] = 25
s['features'].append('sso')
del s['legacy_mode']
json.dump(s, open(p, 'w'), indent=2)
EOF
