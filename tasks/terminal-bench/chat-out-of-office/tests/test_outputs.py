import os

def text():
    return open('/app/ooo.txt').read()

def test_return_date():
    assert 'june 3' in text().lower()
    assert 'june 30' not in text().lower()

def test_contact():
    assert 'Dana Lee' in text()
    assert 'dana.lee@example.com' in text()

def test_length():
    assert 10 <= len(text().split()) <= 80
