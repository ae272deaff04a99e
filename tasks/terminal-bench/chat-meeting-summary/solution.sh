#!/bin/bash
set -euo pipefail
cat > /app/summary.md <<'EOF'
# Product sync decisions
- The mobile app launch is postponed from March 3 to March 14.
- Two additional QA engineers will be hired this quarter.
- Releases move from monthly to weekly, starting in April.
EOF
