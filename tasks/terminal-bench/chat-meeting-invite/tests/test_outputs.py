def lines():
    return [l.strip() for l in open('/app/invite.ics').read().replace('\r', '').split('\n') if l.strip()]

def props():
    out = {}
    for l in lines():
        if ':' in l:
            k, v = l.split(':', 1)
            out.setdefault(k.split(';')[0].upper(), v)
    return out

def test_structure():
    ls = lines()
    assert ls[0] == 'BEGIN:VCALENDAR' and ls[-1] == 'END:VCALENDAR'
    assert 'VERSION:2.0' in ls
    assert ls.count('BEGIN:VEVENT') == 1 and ls.count('END:VEVENT') == 1
    assert ls.index('BEGIN:VEVENT') < ls.index('END:VEVENT')

def test_start():
    assert props().get('DTSTART') == '20240514T150000'

def test_end():
    assert props().get('DTEND') == '20240514T154500'

def test_summary_location():
    p = props()
    assert 'budget review' in p.get('SUMMARY', '').lower()
    assert '4B' in p.get('LOCATION', '')
