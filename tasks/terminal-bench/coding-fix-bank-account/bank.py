class InsufficientFunds(Exception):
    pass


class Account:
    def __init__(self, owner, balance=0):
        self.owner = owner
        self.balance = balance
        self._history = []

    def deposit(self, amount):
        self.balance += amount
        self._history.append(("deposit", amount))

    def withdraw(self, amount):
        self.balance -= amount
        self._history.append(("withdraw", amount))

    def transfer(self, other, amount):
        other.deposit(amount)
        self.withdraw(amount)

    def history(self):
        return self._history
