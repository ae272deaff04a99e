import os, re

def text():
    return open('/app/message_expanded.txt').read()

def test_acronyms_gone():
    for a in ('FYI', 'ASAP', 'ETA', 'EOD', 'BTW'):
        assert not re.search(r'\b%s\b' % a, text(), re.I), a

def test_expansions_present():
    t = ' '.join(text().lower().split())
    for p in ('for your information', 'as soon as possible', 'estimated time of arrival', 'end of day', 'by the way'):
        assert p in t, p

def test_content_kept():
    t = text().lower()
    for w in ('thursday', 'deck', 'budget', 'friday', 'demo'):
        assert w in t, w
