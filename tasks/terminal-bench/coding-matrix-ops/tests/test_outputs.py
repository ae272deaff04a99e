import importlib.util, os, subprocess, sys
sys.dont_write_bytecode = True

def load(path):
    name = os.path.splitext(os.path.basename(path))[0]
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod

import copy, pytest

def test_transpose():
    m = load('/app/matrix.py')
    a = [[1, 2, 3], [4, 5, 6]]
    keep = copy.deepcopy(a)
    assert m.transpose(a) == [[1, 4], [2, 5], [3, 6]]
    assert a == keep
    assert m.transpose([[7]]) == [[7]]

def test_multiply():
    m = load('/app/matrix.py')
    a = [[1, 2], [3, 4], [5, 6]]
    b = [[7, 8, 9], [10, 11, 12]]
    keep = copy.deepcopy((a, b))
    assert m.multiply(a, b) == [[27, 30, 33], [61, 68, 75], [95, 106, 117]]
    assert (a, b) == keep
    assert m.multiply([[2]], [[3]]) == [[6]]
    assert m.multiply([[1, 2, 3]], [[1], [2], [3]]) == [[14]]

def test_mismatch():
    m = load('/app/matrix.py')
    with pytest.raises(ValueError):
        m.multiply([[1, 2]], [[1, 2]])

def test_identity():
    m = load('/app/matrix.py')
    assert m.identity(3) == [[1, 0, 0], [0, 1, 0], [0, 0, 1]]
    a = [[2, 3], [4, 5]]
    assert m.multiply(a, m.identity(2)) == a
