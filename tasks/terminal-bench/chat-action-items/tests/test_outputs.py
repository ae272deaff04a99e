import re

def items():
    return [l.strip() for l in open('/app/sam_todo.md') if l.strip()]

def test_checklist_format():
    it = items()
    assert len(it) == 3
    for l in it:
        assert re.match(r'- \[ \] \S.*\(due \d{4}-\d\d-\d\d\)$', l), l

def test_dates_in_order():
    dates = [re.search(r'\(due (\d{4}-\d\d-\d\d)\)', l).group(1) for l in items()]
    assert dates == ['2024-06-12', '2024-06-14', '2024-06-20']

def test_tasks():
    it = [l.lower() for l in items()]
    assert 'pricing' in it[0]
    assert 'report' in it[1]
    assert 'onboarding' in it[2]
    assert not any('logo' in l or 'vendor' in l for l in it)
