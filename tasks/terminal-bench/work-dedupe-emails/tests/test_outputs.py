import os

def expected():
    return sorted({l.strip().lower() for l in open('/app/emails.txt') if l.strip()})

def got():
    return open('/app/unique_emails.txt').read().splitlines()

def test_exists():
    assert os.path.isfile('/app/unique_emails.txt')

def test_unique_lowercase():
    g = [l for l in got() if l.strip()]
    assert g == [l.strip().lower() for l in g]
    assert len(g) == len(set(g))

def test_exact():
    assert [l for l in got() if l != ''] == expected()
