import importlib.util, os, subprocess, sys
sys.dont_write_bytecode = True

def load(path):
    name = os.path.splitext(os.path.basename(path))[0]
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod

import pytest

def test_deposit_withdraw():
    b = load('/app/bank.py')
    a = b.Account('ann', 100)
    a.deposit(50)
    a.withdraw(30)
    assert a.balance == 120
    assert a.history() == [('deposit', 50), ('withdraw', 30)]
    for bad in (0, -5):
        with pytest.raises(ValueError):
            a.deposit(bad)
        with pytest.raises(ValueError):
            a.withdraw(bad)
    assert a.balance == 120 and len(a.history()) == 2

def test_no_overdraft():
    b = load('/app/bank.py')
    a = b.Account('ann', 20)
    with pytest.raises(b.InsufficientFunds):
        a.withdraw(21)
    assert a.balance == 20 and a.history() == []

def test_transfer():
    b = load('/app/bank.py')
    a, c = b.Account('ann', 100), b.Account('cy', 5)
    a.transfer(c, 60)
    assert (a.balance, c.balance) == (40, 65)
    assert a.history() == [('withdraw', 60)] and c.history() == [('deposit', 60)]

def test_failed_transfer_changes_nothing():
    b = load('/app/bank.py')
    a, c = b.Account('ann', 10), b.Account('cy', 5)
    with pytest.raises(b.InsufficientFunds):
        a.transfer(c, 50)
    with pytest.raises(ValueError):
        a.transfer(c, -3)
    assert (a.balance, c.balance) == (10, 5)
    assert a.history() == [] and c.history() == []
