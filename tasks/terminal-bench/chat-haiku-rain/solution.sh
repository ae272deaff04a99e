#!/bin/bash
set -euo pipefail
cat > /app/poem.txt <<'EOF'
Soft rain on the roof
gutters hum a silver song
puddles hold the sky
EOF
