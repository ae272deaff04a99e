#!/bin/bash
set -euo pipefail
cat > /app/colsum.sh <<'EOF'
#!/bin/bash
if [ $# -ne 2 ]; then
    echo "usage: colsum.sh FILE COLUMN" >&2
    exit 2
fi
awk -F, -v col="$2" '
    NR == 1 { for (i = 1; i <= NF; i++) if ($i == col) c = i
              if (!c) { print "no such column: " col > "/dev/stderr"; bad = 1; exit 1 }
              next }
    { s += $c }
    END { if (!bad) printf "%.2f\n", s }' "$1"
EOF
