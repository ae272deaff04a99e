import importlib.util, os, subprocess, sys
sys.dont_write_bytecode = True

def load(path):
    name = os.path.splitext(os.path.basename(path))[0]
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod

import pytest, random

def test_examples():
    w = load('/app/wrap.py').wrap
    assert w('the quick brown fox', 10) == ['the quick', 'brown fox']
    assert w('a b c d e', 3) == ['a b', 'c d', 'e']
    assert w('  hello \n\n world  ', 20) == ['hello world']
    assert w('', 5) == [] and w('   \n ', 5) == []

def test_long_words():
    w = load('/app/wrap.py').wrap
    assert w('abcdefghij', 4) == ['abcd', 'efgh', 'ij']
    assert w('hi abcdefgh ok', 4) == ['hi', 'abcd', 'efgh', 'ok']
    assert w('abcdef xy', 3) == ['abc', 'def', 'xy']
    assert w('abcde x', 4) == ['abcd', 'e x']

def test_properties():
    w = load('/app/wrap.py').wrap
    rng = random.Random(1)
    words = ['lorem', 'ipsum', 'a', 'dolor', 'sit', 'amet', 'consectetur', 'adipiscing', 'elit', 'x']
    for _ in range(200):
        text = ' '.join(rng.choice(words) for _ in range(rng.randint(1, 30)))
        width = rng.randint(12, 40)
        lines = w(text, width)
        assert all(0 < len(l) <= width for l in lines)
        assert ' '.join(lines).split() == text.split()
        for a, b in zip(lines, lines[1:]):
            assert len(a) + 1 + len(b.split()[0]) > width

def test_bad_width():
    with pytest.raises(ValueError):
        load('/app/wrap.py').wrap('abc', 0)
