#!/bin/bash
set -euo pipefail
awk '{print $1}' /app/access.log | sort | uniq -c | awk '{print $1, $2}' | sort -k1,1nr -k2,2 | head -5 > /app/top_ips.txt
