#!/bin/bash
set -euo pipefail
cat > /app/queries.py <<'EOF'
def top_customers(conn, n):
    rows = conn.execute(
        """SELECT c.name, SUM(o.amount_cents) AS total
           FROM customers c JOIN orders o ON o.customer_id = c.id
           WHERE o.status = 'paid'
           GROUP BY c.id
           ORDER BY total DESC, c.name ASC
           LIMIT ?""", (n,)).fetchall()
    return [(name, int(total)) for name, total in rows]
EOF
