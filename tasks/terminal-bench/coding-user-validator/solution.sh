#!/bin/bash
set -euo pipefail
cat > /app/validate_user.py <<'EOF'
import json
import sys


def problems(obj):
    out = []
    name = obj.get("name")
    if not isinstance(name, str) or not name.strip():
        out.append("name: must be a non-empty string")
    age = obj.get("age")
    if not isinstance(age, int) or isinstance(age, bool) or not 0 <= age <= 150:
        out.append("age: must be an integer between 0 and 150")
    email = obj.get("email")
    ok = isinstance(email, str) and email.count("@") == 1
    if ok:
        local, domain = email.split("@")
        ok = bool(local) and "." in domain
    if not ok:
        out.append("email: invalid address")
    return out


try:
    data = json.load(open(sys.argv[1]))
except (OSError, ValueError) as e:
    print("error: cannot read JSON: %s" % e)
    sys.exit(1)
if not isinstance(data, dict):
    print("error: not a JSON object")
    sys.exit(1)
p = problems(data)
if p:
    print("\n".join(p))
    sys.exit(1)
print("OK")
EOF
