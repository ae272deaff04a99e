#!/bin/bash
set -euo pipefail
cat > /app/limerick.txt <<'EOF'
A cat with the name of Biscuit
Saw cream and decided to risk it
She leapt on the shelf
And helped her fat self
Then napped in a warm woven basket
EOF
