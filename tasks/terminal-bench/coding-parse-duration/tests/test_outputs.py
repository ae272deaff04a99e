import importlib.util, os, subprocess, sys
sys.dont_write_bytecode = True

def load(path):
    name = os.path.splitext(os.path.basename(path))[0]
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod

import pytest

def test_parse():
    p = load('/app/duration.py').parse_duration
    assert p('1h30m') == 5400
    assert p('2d') == 172800
    assert p('45s') == 45
    assert p('1d2h3m4s') == 93784
    assert p('90m') == 5400
    assert p(' 0s ') == 0

def test_parse_invalid():
    p = load('/app/duration.py').parse_duration
    for bad in ['', 'h', '5', '1x', '1m1h', '1h1h', '-5s', '1.5h', '1h 30m', 'abc']:
        with pytest.raises(ValueError):
            p(bad)

def test_format():
    f = load('/app/duration.py').format_duration
    assert f(3723) == '1h2m3s'
    assert f(86400) == '1d'
    assert f(0) == '0s'
    assert f(90061) == '1d1h1m1s'
    assert f(59) == '59s'
    with pytest.raises(ValueError):
        f(-1)

def test_round_trip():
    m = load('/app/duration.py')
    for n in list(range(0, 5000, 7)) + [86399, 86401, 999999]:
        assert m.parse_duration(m.format_duration(n)) == n
