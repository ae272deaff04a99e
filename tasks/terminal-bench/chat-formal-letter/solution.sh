#!/bin/bash
set -euo pipefail
cat > /app/formal.txt <<'EOF'
Dear Mr. Alvarez,

Thank you for taking the time to speak with me yesterday. To keep the current schedule, we will
need the signed contract by Friday; otherwise, the shipment will have to move to next month.
Please let me know if you would like to arrange another call.

Sincerely,
Jordan Kim
EOF
