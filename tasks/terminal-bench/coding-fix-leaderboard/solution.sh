#!/bin/bash
set -euo pipefail
sed -i 's/key=lambda r: r\[1\], reverse=True/key=lambda r: (-int(r[1]), r[0])/' /app/leaderboard.py
