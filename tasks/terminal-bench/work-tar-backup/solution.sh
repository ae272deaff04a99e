#!/bin/bash
set -euo pipefail
cd /app && tar --exclude='*.bak' -czf backup.tar.gz config
