import collections, os

def expected():
    c = collections.Counter(l.split()[0] for l in open('/app/access.log') if l.strip())
    return [('%d %s' % (n, ip)) for ip, n in sorted(c.items(), key=lambda x: (-x[1], x[0]))[:5]]

def got():
    with open('/app/top_ips.txt') as f:
        return [' '.join(l.split()) for l in f if l.strip()]

def test_exists():
    assert os.path.isfile('/app/top_ips.txt')

def test_five_lines():
    assert len(got()) == 5

def test_content_and_order():
    assert got() == expected()
