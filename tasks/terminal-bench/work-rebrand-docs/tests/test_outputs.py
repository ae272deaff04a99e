import os, re
DOCS = {'docs/index.md': '# Welcome to ACME Corp\n\nACME Corp builds rockets. Contact ACME Corp sales.\n', 'docs/guide/install.md': 'Install the ACME Corp CLI.\n', 'docs/guide/faq.md': 'Q: Who are we?\nA: A small team.\n', 'docs/legal/terms.txt': 'These terms are between you and ACME Corp.\n', 'docs/legal/privacy.md': 'ACME Corporation and ACME Corp respect your privacy.\n', 'docs/changelog.md': 'v1: first release\n'}
CHANGED = ['guide/install.md', 'index.md', 'legal/privacy.md']

def test_md_rebranded():
    for p, c in DOCS.items():
        if p.endswith('.md'):
            exp = re.sub(r'ACME Corp(?!oration)', 'Globex Inc', c)
            assert open('/app/' + p).read() == exp, p

def test_txt_untouched():
    for p, c in DOCS.items():
        if not p.endswith('.md'):
            assert open('/app/' + p).read() == c

def test_changed_list():
    got = [l.strip() for l in open('/app/changed.txt') if l.strip()]
    assert got == CHANGED
