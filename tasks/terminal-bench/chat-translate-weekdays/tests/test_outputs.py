import unicodedata

DAYS = ['lunes', 'martes', 'miercoles', 'jueves', 'viernes', 'sabado', 'domingo']

def plain(s):
    return ''.join(c for c in unicodedata.normalize('NFKD', s) if not unicodedata.combining(c)).lower()

def lines():
    return [l.strip() for l in open('/app/schedule_es.txt', encoding='utf-8') if l.strip()]

def test_seven_lines():
    assert len(lines()) == 7

def test_spanish_days_in_order():
    for l, day in zip(lines(), DAYS):
        head = plain(l.split(':', 1)[0]).strip()
        assert head == day, (l, day)

def test_activities_present():
    assert all(':' in l and l.split(':', 1)[1].strip() for l in lines())
