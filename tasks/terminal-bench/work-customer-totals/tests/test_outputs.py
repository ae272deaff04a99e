import csv, os, re
from decimal import Decimal

def expected():
    names = {r['id']: r['name'] for r in csv.DictReader(open('/app/customers.csv'))}
    tot = {k: Decimal(0) for k in names}; cnt = {k: 0 for k in names}
    for r in csv.DictReader(open('/app/orders.csv')):
        tot[r['customer_id']] += Decimal(r['amount']); cnt[r['customer_id']] += 1
    return [(names[k], '%.2f' % tot[k], str(cnt[k])) for k in sorted(names, key=lambda k: (-tot[k], names[k]))]

def rows():
    with open('/app/customer_totals.csv', newline='') as f:
        return [[c.strip() for c in r] for r in csv.reader(f) if r]

def test_header():
    assert os.path.isfile('/app/customer_totals.csv')
    assert rows()[0] == ['name', 'total', 'orders']

def test_all_customers():
    assert sorted(r[0] for r in rows()[1:]) == sorted(e[0] for e in expected())

def test_values_and_order():
    got = [tuple(r) for r in rows()[1:]]
    assert got == expected()
