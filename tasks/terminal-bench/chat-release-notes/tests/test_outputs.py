import re

def sections():
    out, cur = {}, None
    order = []
    for l in open('/app/RELEASE_NOTES.md'):
        if l.startswith('## '):
            cur = l[3:].strip()
            order.append(cur)
            out[cur] = []
        elif cur and re.match(r'\s*[-*]\s+', l):
            out[cur].append(l.strip())
    return order, out

def test_title():
    first = [l.strip() for l in open('/app/RELEASE_NOTES.md') if l.strip()][0]
    assert first == '# Release 2.3.0'

def test_section_order():
    assert sections()[0] == ['Breaking Changes', 'Features', 'Bug Fixes']

def test_features_and_breaking():
    s = sections()[1]
    assert len(s['Breaking Changes']) == 1 and 'drop support for API v1' in s['Breaking Changes'][0]
    f = s['Features']
    assert len(f) == 2
    assert 'add pagination to the orders endpoint' in f[0]
    assert 'dark mode toggle in settings' in f[1]

def test_fixes_and_exclusions():
    s = sections()[1]
    f = s['Bug Fixes']
    assert len(f) == 3
    assert 'handle empty cart in checkout' in f[0]
    assert 'refresh tokens no longer expire early' in f[1]
    assert 'date picker shows wrong month in Safari' in f[2]
    t = open('/app/RELEASE_NOTES.md').read()
    for w in ('bump dependencies', 'README badges', 'regression tests', 'billing module'):
        assert w not in t, w
