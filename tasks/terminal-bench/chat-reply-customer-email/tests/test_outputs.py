import os, re

def text():
    return open('/app/reply.txt').read()

def lines():
    return [l.strip() for l in text().splitlines() if l.strip()]

def test_greeting_and_signoff():
    assert 'Priya' in lines()[0]
    assert lines()[-1].rstrip('.') == 'Jordan, DeskWorks Support'

def test_order_number_and_date():
    t = text()
    assert '48213' in t
    assert re.search(r'june\s*10|10\s*june|06[-/]10|10[-/]06', t, re.I)

def test_apology():
    assert re.search(r'sorry|apologi[sz]e', text(), re.I)

def test_length():
    n = len(text().split())
    assert 40 <= n <= 200, n
