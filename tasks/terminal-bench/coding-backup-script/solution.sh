#!/bin/bash
set -euo pipefail
cat > /app/backup.sh <<'EOF'
#!/bin/bash
set -euo pipefail
if [ $# -lt 2 ]; then
    echo "usage: $0 SRC DEST" >&2
    exit 2
fi
src=${1%/}
dest=$2
if [ ! -d "$src" ]; then
    echo "error: $src is not a directory" >&2
    exit 1
fi
name=$(basename "$src")
mkdir -p "$dest"
tar -czf "$dest/$name.tar.gz" -C "$(dirname "$src")" "$name"
echo "$dest/$name.tar.gz"
EOF
chmod +x /app/backup.sh
