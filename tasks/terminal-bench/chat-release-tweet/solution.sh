#!/bin/bash
set -euo pipefail
cat > /app/tweet.txt <<'EOF'
Moxi 2.0 is here: faster startup, a smarter sandbox and a cleaner CLI. Upgrade today and tell us what you build! https://example.com/moxi2 #moxi
EOF
