import pytest
from inventory import Inventory


def test_add_accumulates():
    inv = Inventory()
    inv.add("apple", 3)
    inv.add("apple", 2)
    assert inv.count("apple") == 5


def test_add_rejects_non_positive():
    inv = Inventory()
    with pytest.raises(ValueError):
        inv.add("apple", 0)
    with pytest.raises(ValueError):
        inv.add("apple", -1)


def test_count_unknown_is_zero():
    assert Inventory().count("pear") == 0


def test_remove():
    inv = Inventory()
    inv.add("apple", 5)
    inv.remove("apple", 2)
    assert inv.count("apple") == 3


def test_remove_too_many():
    inv = Inventory()
    inv.add("apple", 1)
    with pytest.raises(ValueError):
        inv.remove("apple", 2)
    assert inv.count("apple") == 1


def test_remove_all_drops_item():
    inv = Inventory()
    inv.add("apple", 2)
    inv.add("kiwi", 1)
    inv.remove("apple", 2)
    assert inv.names() == ["kiwi"]


def test_total():
    inv = Inventory()
    inv.add("b", 2)
    inv.add("a", 3)
    assert inv.total() == 5
    assert inv.names() == ["a", "b"]
