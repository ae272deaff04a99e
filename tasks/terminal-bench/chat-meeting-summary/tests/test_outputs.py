import os, re

def bullets(path):
    out = []
    for l in open(path):
        m = re.match(r'\s*(?:[-*+]|\d+[.)])\s+(.*\S)', l)
        if m:
            out.append(m.group(1))
    return out
TOPICS = {
    'launch date': r'march\s*14|14\s*march|mar\.?\s*14|03[-/]14',
    'qa hiring': r'\bqa\b|quality assurance|testers?\b',
    'weekly releases': r'weekly|every week|once a week',
}

def test_three_bullets():
    assert len(bullets('/app/summary.md')) == 3

def test_one_decision_per_bullet():
    b = bullets('/app/summary.md')
    for name, pat in TOPICS.items():
        hits = [x for x in b if re.search(pat, x, re.I)]
        assert len(hits) == 1, (name, b)

def test_short_and_clean():
    assert all(len(x.split()) <= 30 for x in bullets('/app/summary.md'))
    for l in open('/app/summary.md'):
        s = l.strip()
        assert not s or s.startswith('#') or re.match(r'[-*+]\s', s), s
