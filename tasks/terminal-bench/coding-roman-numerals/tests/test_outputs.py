import importlib.util, os, subprocess, sys
sys.dont_write_bytecode = True

def load(path):
    name = os.path.splitext(os.path.basename(path))[0]
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod

import pytest

def test_to_roman():
    r = load('/app/roman.py')
    cases = {1: 'I', 4: 'IV', 9: 'IX', 14: 'XIV', 40: 'XL', 90: 'XC', 400: 'CD', 1994: 'MCMXCIV',
             2024: 'MMXXIV', 3999: 'MMMCMXCIX', 444: 'CDXLIV'}
    for n, s in cases.items():
        assert r.to_roman(n) == s

def test_round_trip():
    r = load('/app/roman.py')
    for n in range(1, 4000):
        assert r.from_roman(r.to_roman(n)) == n

def test_errors():
    r = load('/app/roman.py')
    for bad in (0, -5, 4000):
        with pytest.raises(ValueError):
            r.to_roman(bad)
    for bad in ('', 'IIII', 'IC', 'VX', 'ABC', 'MMMM', 'IL', 'XXL'):
        with pytest.raises(ValueError):
            r.from_roman(bad)
