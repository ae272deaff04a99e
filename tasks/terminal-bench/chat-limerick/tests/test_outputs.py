import os

def lines():
    return [l.strip() for l in open('/app/limerick.txt') if l.strip()]

def test_five_lines():
    assert len(lines()) == 5

def test_line_length():
    assert all(1 <= len(l.split()) <= 12 for l in lines())

def test_name():
    assert 'Biscuit' in open('/app/limerick.txt').read()
