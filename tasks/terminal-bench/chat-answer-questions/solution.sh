#!/bin/bash
set -euo pipefail
cat > /app/answers.json <<'EOF'
{"1": 210, "2": 36, "3": 366, "4": 90, "5": 1024, "6": 86400, "7": 30}
EOF
