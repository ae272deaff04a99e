#!/bin/bash
set -euo pipefail
awk '$2 == "ERROR"' /app/logs/app.log | wc -l > /app/error_count.txt
