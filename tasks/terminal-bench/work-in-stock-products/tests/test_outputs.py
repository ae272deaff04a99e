import csv, os

def rows():
    with open('/app/in_stock.csv', newline='') as f:
        return [[c.strip() for c in r] for r in csv.reader(f) if r]

def source():
    with open('/app/products.csv', newline='') as f:
        return list(csv.reader(f))[1:]

def test_header():
    assert os.path.isfile('/app/in_stock.csv')
    assert rows()[0] == ['sku', 'name', 'price', 'stock']

def test_only_in_stock():
    got = rows()[1:]
    assert sorted(map(tuple, got)) == sorted(tuple(r) for r in source() if int(r[3]) > 0)

def test_sorted_by_price():
    prices = [float(r[2]) for r in rows()[1:]]
    assert prices and prices == sorted(prices)
