import re

QS = [l.strip() for l in open('/app/questions.txt') if l.strip()]

def sections():
    out, cur = [], None
    for l in open('/app/faq.md'):
        if l.startswith('## '):
            cur = [l[3:].strip(), '']
            out.append(cur)
        elif cur is not None:
            cur[1] += l
    return out

def test_headings():
    assert [s[0] for s in sections()] == QS

def test_returns_and_shipping():
    s = sections()
    assert re.search(r'\b30\b', s[0][1]) and 'day' in s[0][1].lower()
    assert '$5.99' in s[1][1] and '$50' in s[1][1]

def test_contact_and_hours():
    s = sections()
    assert 'help@shop.example' in s[2][1]
    a = s[3][1]
    assert re.search(r'mon', a, re.I) and re.search(r'fri', a, re.I)
    assert re.search(r'\b9\b|9:00|9 ?am', a, re.I) and re.search(r'17|5 ?pm', a, re.I)
    assert 'CET' in a
