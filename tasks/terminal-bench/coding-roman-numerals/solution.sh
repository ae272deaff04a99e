#!/bin/bash
set -euo pipefail
cat > /app/roman.py <<'EOF'
VALS = [(1000, "M"), (900, "CM"), (500, "D"), (400, "CD"), (100, "C"), (90, "XC"),
        (50, "L"), (40, "XL"), (10, "X"), (9, "IX"), (5, "V"), (4, "IV"), (1, "I")]


def to_roman(n):
    if not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= 3999:
        raise ValueError(n)
    out = []
    for v, s in VALS:
        while n >= v:
            out.append(s)
            n -= v
    return "".join(out)


_TABLE = {to_roman(i): i for i in range(1, 4000)}


def from_roman(s):
    try:
        return _TABLE[s]
    except (KeyError, TypeError):
        raise ValueError(s)
EOF
