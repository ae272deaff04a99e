#!/bin/bash
set -euo pipefail
gzip /app/logs/*.log
