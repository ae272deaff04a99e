#!/bin/bash
set -euo pipefail
cat > /app/duration.py <<'EOF'
import re

UNITS = [("d", 86400), ("h", 3600), ("m", 60), ("s", 1)]
_RE = re.compile(r"(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?")


def parse_duration(s):
    s = s.strip()
    m = _RE.fullmatch(s)
    if not s or not m:
        raise ValueError("bad duration: %r" % s)
    return sum(int(g) * mult for g, (_, mult) in zip(m.groups(), UNITS) if g is not None)


def format_duration(seconds):
    if not isinstance(seconds, int) or seconds < 0:
        raise ValueError(seconds)
    if seconds == 0:
        return "0s"
    out = []
    for u, mult in UNITS:
        q, seconds = divmod(seconds, mult)
        if q:
            out.append("%d%s" % (q, u))
    return "".join(out)
EOF
