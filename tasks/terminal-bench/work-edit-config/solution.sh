#!/bin/bash
set -euo pipefail
sed -i -e 's/^port=.*/port=8080/' -e 's/^debug=.*/debug=false/' /app/app.conf
grep -q '^log_level=' /app/app.conf || echo 'log_level=info' >> /app/app.conf
