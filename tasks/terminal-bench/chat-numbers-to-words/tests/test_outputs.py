import os, re
NUMS = [7, 13, 42, 100, 315, 1000, 2024, 90, 1100, 9999, 0, 58, 711]
ONES = 'zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen seventeen eighteen nineteen'.split()
TENS = '_ _ twenty thirty forty fifty sixty seventy eighty ninety'.split()

def w(n):
    if n < 20:
        return ONES[n]
    if n < 100:
        return TENS[n // 10] + (' ' + ONES[n % 10] if n % 10 else '')
    if n < 1000:
        return ONES[n // 100] + ' hundred' + (' ' + w(n % 100) if n % 100 else '')
    return w(n // 1000) + ' thousand' + (' ' + w(n % 1000) if n % 1000 else '')

def norm(s):
    s = s.strip().lower().replace('-', ' ').replace(',', ' ')
    return ' '.join(x for x in s.split() if x != 'and')

def got():
    return [l for l in open('/app/words.txt').read().splitlines() if l.strip()]

def test_line_count():
    assert len(got()) == len(NUMS)

def test_no_digits_lowercase():
    t = open('/app/words.txt').read()
    assert not re.search(r'\d', t)
    assert t == t.lower()

def test_small_numbers():
    g = got()
    for i, n in enumerate(NUMS):
        if n < 100:
            assert norm(g[i]) == w(n), (n, g[i])

def test_large_numbers():
    g = got()
    for i, n in enumerate(NUMS):
        if n >= 100:
            assert norm(g[i]) == w(n), (n, g[i])
