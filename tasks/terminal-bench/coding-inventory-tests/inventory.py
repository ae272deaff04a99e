class Inventory:
    def __init__(self):
        self.items = {}

    def add(self, name, qty):
        self.items[name] = qty

    def remove(self, name, qty):
        raise NotImplementedError

    def count(self, name):
        return self.items[name]

    def names(self):
        return list(self.items)

    def total(self):
        return len(self.items)
