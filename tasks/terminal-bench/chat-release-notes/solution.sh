#!/bin/bash
set -euo pipefail
cat > /app/RELEASE_NOTES.md <<'EOF'
# Release 2.3.0

## Breaking Changes
- drop support for API v1

## Features
- **api:** add pagination to the orders endpoint
- **ui:** dark mode toggle in settings

## Bug Fixes
- handle empty cart in checkout
- **auth:** refresh tokens no longer expire early
- **ui:** date picker shows wrong month in Safari
EOF
