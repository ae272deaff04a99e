import os

def expected():
    out = []
    for name in os.listdir('/app/projects'):
        base = os.path.join('/app/projects', name)
        if os.path.isdir(base):
            total = sum(os.path.getsize(os.path.join(dp, f)) for dp, dn, fn in os.walk(base) for f in fn)
            out.append((total, name))
    return ['%d %s' % x for x in sorted(out, key=lambda x: (-x[0], x[1]))]

def got():
    return [' '.join(l.split()) for l in open('/app/usage.txt') if l.strip()]

def test_exists():
    assert os.path.isfile('/app/usage.txt')

def test_values():
    assert sorted(got()) == sorted(expected())

def test_order():
    assert got() == expected()
