import collections, os, re

def expected():
    c = collections.Counter(re.match(r'\[\S+ (\d\d):', l).group(1) for l in open('/app/server.log') if l.strip())
    return [(h, c[h]) for h in sorted(c)]

def lines():
    return [l.strip().replace(' ', '') for l in open('/app/hourly.csv') if l.strip()]

def test_header():
    assert os.path.isfile('/app/hourly.csv')
    assert lines()[0] == 'hour,count'

def test_counts():
    got = [tuple(l.split(',')) for l in lines()[1:]]
    assert got == [(h, str(n)) for h, n in expected()]
