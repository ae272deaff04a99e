#!/bin/bash
set -euo pipefail
cat > /app/inventory.py <<'EOF'
class Inventory:
    def __init__(self):
        self.items = {}

    def add(self, name, qty):
        if qty <= 0:
            raise ValueError("quantity must be positive")
        self.items[name] = self.items.get(name, 0) + qty

    def remove(self, name, qty):
        have = self.items.get(name, 0)
        if qty <= 0 or qty > have:
            raise ValueError("cannot remove %d of %s" % (qty, name))
        if qty == have:
            del self.items[name]
        else:
            self.items[name] = have - qty

    def count(self, name):
        return self.items.get(name, 0)

    def names(self):
        return sorted(self.items)

    def total(self):
        return sum(self.items.values())
EOF
