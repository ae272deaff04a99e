#!/bin/bash
set -euo pipefail
cat > /app/ooo.txt <<'EOF'
Thank you for your email. I am out of the office from May 27 and will be back on June 3, with
limited access to email until then. For anything urgent, please contact my colleague Dana Lee
at dana.lee@example.com. I will reply to your message as soon as I can after I return.
EOF
