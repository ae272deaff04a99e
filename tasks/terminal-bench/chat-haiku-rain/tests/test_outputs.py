import os, re

def lines():
    return [l.strip() for l in open('/app/poem.txt') if l.strip()]

def test_three_lines():
    assert os.path.isfile('/app/poem.txt')
    assert len(lines()) == 3

def test_short_lines():
    assert all(1 <= len(l.split()) <= 8 for l in lines())

def test_mentions_rain():
    assert re.search(r'\brain', open('/app/poem.txt').read(), re.I)
