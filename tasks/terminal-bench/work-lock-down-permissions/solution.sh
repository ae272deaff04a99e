#!/bin/bash
set -euo pipefail
find /app/site -type d -exec chmod 755 {} +
find /app/site -type f -exec chmod 644 {} +
chmod 755 /app/site/bin/*.sh
find /app/site/private -type d -exec chmod 700 {} +
find /app/site/private -type f -exec chmod 600 {} +
