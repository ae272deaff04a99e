import importlib.util, os, subprocess, sys
sys.dont_write_bytecode = True

def load(path):
    name = os.path.splitext(os.path.basename(path))[0]
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod

import pytest

def test_mean():
    m = load('/app/stats.py')
    assert m.mean([1, 2]) == 1.5
    assert m.mean([5]) == 5
    assert abs(m.mean([2, 4, 9]) - 5.0) < 1e-9
    assert abs(m.mean([0.5, 0.25]) - 0.375) < 1e-9

def test_median():
    m = load('/app/stats.py')
    assert m.median([4, 1, 3, 2]) == 2.5
    assert m.median([7, 1, 3]) == 3
    assert m.median([10]) == 10

def test_empty():
    m = load('/app/stats.py')
    with pytest.raises(ValueError):
        m.mean([])
    with pytest.raises(ValueError):
        m.median([])
