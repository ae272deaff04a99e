import importlib.util, os, subprocess, sys
sys.dont_write_bytecode = True

def load(path):
    name = os.path.splitext(os.path.basename(path))[0]
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod

import pytest, time

def test_basic_eviction():
    c = load('/app/lru.py').LRUCache(2)
    c.put('a', 1)
    c.put('b', 2)
    assert c.get('a') == 1
    c.put('c', 3)
    assert c.get('b') is None
    assert c.get('a') == 1 and c.get('c') == 3
    assert len(c) == 2

def test_update_and_contains():
    c = load('/app/lru.py').LRUCache(2)
    c.put('a', 1)
    c.put('b', 2)
    c.put('a', 10)
    assert 'b' in c
    c.put('c', 3)
    assert 'b' not in c and c.get('a') == 10
    assert len(c) == 2
    with pytest.raises(ValueError):
        load('/app/lru.py').LRUCache(0)

def test_contains_does_not_touch():
    c = load('/app/lru.py').LRUCache(2)
    c.put('a', 1)
    c.put('b', 2)
    assert 'a' in c
    c.put('c', 3)
    assert 'a' not in c and c.get('b') == 2

def test_performance():
    c = load('/app/lru.py').LRUCache(50000)
    t = time.time()
    for i in range(100000):
        c.put(i, i)
    for i in range(100000):
        c.get(i)
    assert time.time() - t < 8
    assert len(c) == 50000 and c.get(99999) == 99999 and c.get(0) is None
