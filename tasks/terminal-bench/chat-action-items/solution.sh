#!/bin/bash
set -euo pipefail
cat > /app/sam_todo.md <<'EOF'
- [ ] Update the pricing page with the new tiers (due 2024-06-12)
- [ ] Send the Q2 revenue report to finance (due 2024-06-14)
- [ ] Schedule the onboarding session for the two new hires (due 2024-06-20)
EOF
