import importlib.util, os, subprocess, sys
sys.dont_write_bytecode = True

def load(path):
    name = os.path.splitext(os.path.basename(path))[0]
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod

import pytest, re

def ev():
    return load('/app/calc.py').evaluate

def test_basic():
    e = ev()
    assert e('2 + 3 * 4') == 14
    assert e('8 - 3 - 2') == 3
    assert e('(2 + 3) * 4') == 20
    assert e('7 / 2') == 3.5
    assert e('12/4/3') == 1
    assert e(' 1.5+2.25 ') == 3.75

def test_unary_and_nesting():
    e = ev()
    assert e('-3') == -3
    assert e('2 * -(1 + 1)') == -4
    assert e('--4') == 4
    assert e('+(((2)))') == 2
    assert e('-2 * -2 - -1') == 5
    assert abs(e('1 / 3') - 1 / 3) < 1e-12

def test_int_result_type():
    e = ev()
    assert type(e('6 / 3')) is int
    assert type(e('2.5 * 2')) is int
    assert type(e('5 / 2')) is float

def test_errors():
    e = ev()
    for bad in ['2 +', '(1', '1 2', 'a + 1', '', '()', '1 + * 2', '3)']:
        with pytest.raises(ValueError):
            e(bad)
    with pytest.raises(ZeroDivisionError):
        e('1 / (2 - 2)')

def test_no_eval():
    src = open('/app/calc.py').read()
    for pat in (r'(?<![.\w])eval\s*\(', r'(?<![.\w])exec\s*\(', r'(?<![.\w])compile\s*\(',
                r'\bimport\s+ast\b', r'\bfrom\s+ast\b', r'__import__'):
        assert not re.search(pat, src), pat
