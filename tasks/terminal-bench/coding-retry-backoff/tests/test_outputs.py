import importlib.util, os, subprocess, sys
sys.dont_write_bytecode = True

def load(path):
    name = os.path.splitext(os.path.basename(path))[0]
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod

import pytest

class Flaky:
    def __init__(self, fails, exc=OSError):
        self.fails, self.calls, self.exc = fails, 0, exc
    def __call__(self):
        self.calls += 1
        if self.calls <= self.fails:
            raise self.exc('fail %d' % self.calls)
        return 'ok'

def test_success_after_failures():
    r = load('/app/retry.py').retry
    sleeps = []
    f = Flaky(2)
    assert r(f, retries=3, base_delay=0.5, sleep=sleeps.append) == 'ok'
    assert f.calls == 3
    assert sleeps == [0.5, 1.0]

def test_gives_up():
    r = load('/app/retry.py').retry
    sleeps = []
    f = Flaky(10)
    with pytest.raises(OSError, match='fail 4'):
        r(f, retries=3, base_delay=1, sleep=sleeps.append)
    assert f.calls == 4
    assert sleeps == [1, 2, 4]

def test_unlisted_exception_propagates():
    r = load('/app/retry.py').retry
    sleeps = []
    f = Flaky(1, exc=KeyError)
    with pytest.raises(KeyError):
        r(f, retries=5, exceptions=(OSError,), sleep=sleeps.append)
    assert f.calls == 1 and sleeps == []

def test_edge_cases():
    r = load('/app/retry.py').retry
    sleeps = []
    assert r(lambda: 42, sleep=sleeps.append) == 42 and sleeps == []
    f = Flaky(1)
    with pytest.raises(OSError):
        r(f, retries=0, sleep=sleeps.append)
    assert f.calls == 1 and sleeps == []
    with pytest.raises(ValueError):
        r(lambda: 1, retries=-1, sleep=sleeps.append)
