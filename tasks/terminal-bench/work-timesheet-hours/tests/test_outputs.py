import csv, os, re

EXP = {'alice': '22.17', 'bob': '19.50', 'carol': '15.58', 'dan': '0.00'}

def rows():
    with open('/app/hours.csv', newline='') as f:
        return [[c.strip() for c in r] for r in csv.reader(f) if r]

def test_header():
    assert os.path.isfile('/app/hours.csv')
    assert rows()[0] == ['employee', 'hours']

def test_day_shifts():
    got = dict(rows()[1:])
    assert got.get('alice') == EXP['alice']
    assert got.get('carol') == EXP['carol']
    assert got.get('dan') == EXP['dan']

def test_overnight_shifts():
    assert dict(rows()[1:]).get('bob') == EXP['bob']

def test_order_and_format():
    body = rows()[1:]
    assert [r[0] for r in body] == sorted(EXP)
    assert all(re.fullmatch(r'\d+\.\d\d', r[1]) for r in body)
