import importlib.util, os, subprocess, sys
sys.dont_write_bytecode = True

def load(path):
    name = os.path.splitext(os.path.basename(path))[0]
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod

import hashlib, pytest

def test_visible_tests_pass():
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE='1')
    r = subprocess.run([sys.executable, '-m', 'pytest', '-q', '-p', 'no:cacheprovider', '/app/test_inventory.py'],
                       capture_output=True, text=True, cwd='/app', env=env, timeout=20)
    assert r.returncode == 0, r.stdout[-2000:]

def test_test_file_unchanged():
    assert hashlib.sha256(open('/app/test_inventory.py', 'rb').read()).hexdigest() == 'be00a515acc4ca22106ca3ad560993e6b44667b4d9209c74c6fe0e27e70c4de3'

def test_hidden_behaviour():
    inv = load('/app/inventory.py').Inventory()
    inv.add('x', 4)
    inv.add('y', 6)
    inv.remove('y', 6)
    assert inv.count('y') == 0 and inv.names() == ['x'] and inv.total() == 4
    with pytest.raises(ValueError):
        inv.remove('zzz', 1)
    assert inv.names() == ['x']
