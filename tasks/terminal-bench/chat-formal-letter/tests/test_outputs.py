import re

def lines():
    return [l.strip() for l in open('/app/formal.txt') if l.strip()]

def test_salutation():
    assert lines()[0] == 'Dear Mr. Alvarez,'

def test_closing():
    assert lines()[-2:] == ['Sincerely,', 'Jordan Kim']

def test_facts():
    t = open('/app/formal.txt').read().lower()
    for w in ('contract', 'friday', 'shipment'):
        assert w in t, w

def test_no_informal_words():
    t = open('/app/formal.txt').read()
    for w in ('hey', 'thx', 'gonna', 'wanna', 'lmk', 'u', 'cheers'):
        assert not re.search(r'\b%s\b' % w, t, re.I), w
