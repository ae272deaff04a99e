#!/bin/bash
set -euo pipefail
cat > /app/lru.py <<'EOF'
from collections import OrderedDict


class LRUCache:
    def __init__(self, capacity):
        if not isinstance(capacity, int) or capacity < 1:
            raise ValueError("capacity must be >= 1")
        self.capacity = capacity
        self._d = OrderedDict()

    def get(self, key):
        if key not in self._d:
            return None
        self._d.move_to_end(key)
        return self._d[key]

    def put(self, key, value):
        if key in self._d:
            self._d.move_to_end(key)
        elif len(self._d) >= self.capacity:
            self._d.popitem(last=False)
        self._d[key] = value

    def __len__(self):
        return len(self._d)

    def __contains__(self, key):
        return key in self._d
EOF
