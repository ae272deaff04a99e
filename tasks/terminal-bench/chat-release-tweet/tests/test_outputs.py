import os

def text():
    return open('/app/tweet.txt').read().strip()

def test_length():
    assert 0 < len(text()) <= 280

def test_required_parts():
    t = text()
    assert 'Moxi 2.0' in t
    assert '#moxi' in t
    assert 'https://example.com/moxi2' in t

def test_single_paragraph():
    assert '\n\n' not in text().replace('\r', '')
