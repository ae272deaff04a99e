#!/bin/bash
set -euo pipefail
mkdir -p /app/by_dept
awk -F, 'NR==1 {h=$0; next} { f="/app/by_dept/" $3 ".csv"; if (!(f in seen)) { print h > f; seen[f]=1 } print > f }' /app/employees.csv
