#!/bin/bash
set -euo pipefail
cat > /app/faq.md <<'EOF'
# Frequently asked questions

## Can I return something I bought?
Yes. Unworn items can be returned within 30 days of delivery for a full refund.

## How much does shipping cost?
Standard shipping costs $5.99, and it is free for orders over $50.

## How do I contact support?
Email our support team at help@shop.example.

## When is support available?
Support is available Monday to Friday, 9:00-17:00 CET.
EOF
