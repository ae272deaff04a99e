import collections, os, re

def expected():
    words = re.findall(r'[a-z]+', open('/app/book.txt').read().lower())
    c = collections.Counter(words)
    return ['%s %d' % (w, n) for w, n in sorted(c.items(), key=lambda x: (-x[1], x[0]))[:10]]

def got():
    return [' '.join(l.split()) for l in open('/app/top_words.txt') if l.strip()]

def test_exists():
    assert os.path.isfile('/app/top_words.txt')

def test_top_word():
    assert got()[0] == expected()[0]

def test_all_ten():
    assert got() == expected()
