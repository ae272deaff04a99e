import os, re

def bullets(path):
    out = []
    for l in open(path):
        m = re.match(r'\s*(?:[-*+]|\d+[.)])\s+(.*\S)', l)
        if m:
            out.append(m.group(1))
    return out
KEYS = ['printer ink', 'oslo', 'passport', 'plumber', '#204', 'plants', 'laptop']

def test_bullet_count():
    assert len(bullets('/app/notes.md')) == 7

def test_items_in_order():
    b = bullets('/app/notes.md')
    for item, key in zip(b, KEYS):
        assert key in item.lower(), (key, item)

def test_no_extra_text():
    for l in open('/app/notes.md'):
        s = l.strip()
        assert not s or s.startswith('#') or re.match(r'[-*+]\s', s), s
