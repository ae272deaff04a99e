import csv, os, re
from decimal import Decimal

OUT = '/app/region_totals.csv'

def expected():
    tot = {}
    with open('/app/sales.csv') as f:
        for r in csv.DictReader(f):
            tot[r['region']] = tot.get(r['region'], Decimal(0)) + int(r['units']) * Decimal(r['unit_price'])
    return tot

def rows():
    with open(OUT) as f:
        lines = [l.strip() for l in f if l.strip()]
    return lines

def test_header():
    assert os.path.isfile(OUT)
    assert rows()[0].replace(' ', '') == 'region,revenue'

def test_values():
    exp = expected()
    got = {}
    for l in rows()[1:]:
        k, v = l.split(',')
        got[k.strip()] = v.strip()
    assert set(got) == set(exp)
    for k, v in got.items():
        assert re.fullmatch(r'\d+\.\d\d', v), v
        assert Decimal(v) == exp[k].quantize(Decimal('0.01'))

def test_sorted():
    names = [l.split(',')[0].strip() for l in rows()[1:]]
    assert names and names == sorted(names)
