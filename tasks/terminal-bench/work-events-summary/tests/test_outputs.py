import json

def expected():
    valid, invalid = [], 0
    for line in open('/app/events.jsonl'):
        if not line.strip():
            continue
        try:
            o = json.loads(line)
            assert isinstance(o, dict) and all(k in o for k in ('ts', 'user', 'type'))
            valid.append(o)
        except Exception:
            invalid += 1
    by = {}
    for o in valid:
        by[o['type']] = by.get(o['type'], 0) + 1
    return {'total_events': len(valid), 'unique_users': len({o['user'] for o in valid}), 'by_type': by,
            'first_ts': min(o['ts'] for o in valid), 'last_ts': max(o['ts'] for o in valid),
            'invalid_lines': invalid}

def got():
    return json.load(open('/app/summary.json'))

def test_keys():
    assert set(got()) == set(expected())

def test_counts():
    g, e = got(), expected()
    assert g['total_events'] == e['total_events']
    assert g['unique_users'] == e['unique_users']
    assert g['by_type'] == e['by_type']

def test_times():
    g, e = got(), expected()
    assert (g['first_ts'], g['last_ts']) == (e['first_ts'], e['last_ts'])

def test_invalid():
    assert got()['invalid_lines'] == expected()['invalid_lines'] == 3
