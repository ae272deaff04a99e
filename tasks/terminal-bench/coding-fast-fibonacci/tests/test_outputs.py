import importlib.util, os, subprocess, sys
sys.dont_write_bytecode = True

def load(path):
    name = os.path.splitext(os.path.basename(path))[0]
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod

import pytest

def call(expr):
    code = 'import sys; sys.dont_write_bytecode = True; sys.path.insert(0, "/app"); from fib import fib; print(%s)' % expr
    r = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, timeout=5)
    return r

def test_small_values():
    f = load('/app/fib.py').fib
    assert [f(i) for i in range(11)] == [0, 1, 1, 2, 3, 5, 8, 13, 21, 34, 55]

def test_large_fast():
    try:
        r = call('fib(300), fib(1000) % 1000000007')
    except subprocess.TimeoutExpired:
        raise AssertionError('too slow')
    a, b = r.stdout.split()
    assert a == '222232244629420445529739893461909967206666939096499764990979600'
    assert b == '517691607'

def test_negative():
    try:
        r = call('fib(-1)')
    except subprocess.TimeoutExpired:
        raise AssertionError('too slow')
    assert r.returncode != 0 and 'ValueError' in r.stderr
