import json

def load():
    return json.load(open('/app/settings.json'))

def test_database():
    s = load()
    assert s['database']['host'] == 'db.internal'
    assert s['database']['pool']['max'] == 25 and s['database']['pool']['min'] == 2
    assert s['database']['port'] == 5432

def test_features():
    assert load()['features'] == ['export', 'audit', 'sso']

def test_legacy_removed_rest_kept():
    s = load()
    assert 'legacy_mode' not in s
    assert s['app'] == {'name': 'ledger', 'version': '2.4.1'}
    assert s['timeouts'] == {'read': 30, 'write': 60}
    assert set(s) == {'app', 'database', 'features', 'timeouts'}
