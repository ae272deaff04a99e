#!/bin/bash
set -euo pipefail
grep -oE '[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)*\.[A-Za-z]+' /app/contacts.txt | LC_ALL=C sort -u > /app/emails.txt
