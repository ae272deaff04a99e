#!/bin/bash
set -euo pipefail
{ echo 'hour,count'; awk '{print substr($2,1,2)}' /app/server.log | sort | uniq -c | awk '{print $2 "," $1}'; } > /app/hourly.csv
