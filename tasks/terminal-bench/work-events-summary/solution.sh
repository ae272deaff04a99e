#!/bin/bash
set -euo pipefail
python3 - <<'EOF'
import json
valid, invalid = [], 0
for line in open('/app/events.jsonl'):
    if not line.strip():
        continue
    try:
        o = json.loads(line)
        assert isinstance(o, dict) and all(k in o for k in ('ts', 'user', 'type'))
        valid.append(o)
    except Exception:
        invalid += 1
by = {}
for o in valid:
    by[o['type']] = by.get(o['type'], 0) + 1
json.dump({'total_events': len(valid), 'unique_users': len({o['user'] for o in valid}), 'by_type': by,
           'first_ts': min(o['ts'] for o in valid), 'last_ts': max(o['ts'] for o in valid),
           'invalid_lines': invalid}, open('/app/summary.json', 'w'), indent=2)
EOF
