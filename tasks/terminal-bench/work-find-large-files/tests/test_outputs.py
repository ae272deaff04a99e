import os

def expected():
    out = []
    for dp, dn, fn in os.walk('/app/data'):
        for f in fn:
            p = os.path.join(dp, f)
            if os.path.getsize(p) > 1000:
                out.append(os.path.relpath(p, '/app/data'))
    return sorted(out, key=lambda s: s.encode())

def test_exists():
    assert os.path.isfile('/app/large_files.txt')

def test_set():
    got = [l.rstrip('\n') for l in open('/app/large_files.txt') if l.strip()]
    assert sorted(got) == sorted(expected())

def test_order():
    got = [l.rstrip('\n') for l in open('/app/large_files.txt') if l.strip()]
    assert got == expected()
