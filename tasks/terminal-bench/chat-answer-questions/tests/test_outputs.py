import json

EXP = {'1': 210, '2': 36, '3': 366, '4': 90, '5': 1024, '6': 86400, '7': 30}

def got():
    return json.load(open('/app/answers.json'))

def test_keys_and_types():
    g = got()
    assert set(g) == set(EXP)
    assert all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in g.values())

def test_first_half():
    g = got()
    for k in '123':
        assert abs(g[k] - EXP[k]) < 1e-6, k

def test_second_half():
    g = got()
    for k in '4567':
        assert abs(g[k] - EXP[k]) < 1e-6, k
