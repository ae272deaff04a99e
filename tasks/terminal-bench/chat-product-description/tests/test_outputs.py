import re

def text():
    return open('/app/description.txt').read().strip()

def test_length_single_paragraph():
    t = text()
    assert 50 <= len(t.split()) <= 120
    assert not re.search(r'\n\s*\n', t)

def test_name_price_battery():
    t = text()
    assert 'AeroBuds Pro' in t
    assert '$49.99' in t
    assert '20 hours' in t or '20-hour' in t

def test_rating_and_colors():
    t = text().lower()
    assert 'ipx5' in t
    for c in ('black', 'white', 'teal'):
        assert c in t, c
