#!/bin/bash
set -euo pipefail
cat > /app/reply.txt <<'EOF'
Hi Priya,

Thank you for reaching out, and I'm sorry that your standing desk hasn't arrived yet. I checked
order #48213: the carrier had it held at their regional depot, and I have asked them to release
it for delivery this week. I will personally keep an eye on the tracking so that it reaches you
well before your new job starts on June 10. If it is not moving by Thursday, I will send a
replacement by express shipping at no cost to you.

Best regards,
Jordan, DeskWorks Support
EOF
