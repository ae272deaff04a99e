#!/bin/bash
set -euo pipefail
cat > /app/matrix.py <<'EOF'
def transpose(m):
    return [list(r) for r in zip(*m)]


def multiply(a, b):
    if not a or not b or len(a[0]) != len(b):
        raise ValueError("dimension mismatch")
    bt = transpose(b)
    return [[sum(x * y for x, y in zip(row, col)) for col in bt] for row in a]


def identity(n):
    return [[1 if i == j else 0 for j in range(n)] for i in range(n)]
EOF
