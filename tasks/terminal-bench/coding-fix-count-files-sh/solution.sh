#!/bin/bash
set -euo pipefail
cat > /app/count_files.sh <<'EOF'
#!/bin/bash
find "$1" -mindepth 1 -maxdepth 1 -type f | wc -l
EOF
