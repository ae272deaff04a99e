#!/bin/bash
set -euo pipefail
{ head -1 /app/products.csv; tail -n +2 /app/products.csv | awk -F, '$4 > 0' | sort -t, -k3,3g; } > /app/in_stock.csv
