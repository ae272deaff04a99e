#!/bin/bash
set -euo pipefail
cat > /app/retry.py <<'EOF'
import time


def retry(func, retries=3, base_delay=1.0, exceptions=(Exception,), sleep=time.sleep):
    if retries < 0:
        raise ValueError("retries must be >= 0")
    attempt = 0
    while True:
        try:
            return func()
        except exceptions:
            if attempt >= retries:
                raise
            attempt += 1
            sleep(base_delay * 2 ** (attempt - 1))
EOF
