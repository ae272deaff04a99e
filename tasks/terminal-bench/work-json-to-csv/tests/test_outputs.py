import csv, json, os

def rows():
    with open('/app/users.csv', newline='') as f:
        return [r for r in csv.reader(f) if r]

def test_header():
    assert os.path.isfile('/app/users.csv')
    assert [c.strip() for c in rows()[0]] == ['id', 'name', 'email', 'city']

def test_rows():
    users = sorted(json.load(open('/app/users.json')), key=lambda u: u['id'])
    exp = [[str(u['id']), u['name'], u['email'], u['address']['city']] for u in users]
    assert [[c.strip() for c in r] for r in rows()[1:]] == exp
