import importlib.util, os, subprocess, sys
sys.dont_write_bytecode = True

def load(path):
    name = os.path.splitext(os.path.basename(path))[0]
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod

import json

def check(tmp_path, content):
    p = tmp_path / 'u.json'
    p.write_text(content if isinstance(content, str) else json.dumps(content))
    r = subprocess.run([sys.executable, '/app/validate_user.py', str(p)], capture_output=True, text=True, timeout=10)
    return r.returncode, r.stdout

def test_valid(tmp_path):
    rc, out = check(tmp_path, {'name': 'Ann', 'age': 31, 'email': 'ann@example.com', 'role': 'admin'})
    assert rc == 0 and out.strip() == 'OK'
    rc, out = check(tmp_path, {'name': 'Bo', 'age': 0, 'email': 'b@x.io'})
    assert rc == 0 and out.strip() == 'OK'

def test_single_problems(tmp_path):
    for bad, field in [({'name': '', 'age': 3, 'email': 'a@b.c'}, 'name'),
                       ({'age': 3, 'email': 'a@b.c'}, 'name'),
                       ({'name': 'A', 'age': 151, 'email': 'a@b.c'}, 'age'),
                       ({'name': 'A', 'age': 3.5, 'email': 'a@b.c'}, 'age'),
                       ({'name': 'A', 'age': True, 'email': 'a@b.c'}, 'age'),
                       ({'name': 'A', 'age': 3, 'email': 'a@@b.c'}, 'email'),
                       ({'name': 'A', 'age': 3, 'email': '@b.c'}, 'email'),
                       ({'name': 'A', 'age': 3, 'email': 'a@bc'}, 'email')]:
        rc, out = check(tmp_path, bad)
        assert rc == 1, bad
        lines = [l for l in out.splitlines() if l.strip()]
        assert len(lines) == 1 and field in lines[0], (bad, out)

def test_multiple_problems(tmp_path):
    rc, out = check(tmp_path, {'name': 7, 'age': -1, 'email': 'nope'})
    assert rc == 1
    lines = [l for l in out.splitlines() if l.strip()]
    assert len(lines) == 3
    for f in ('name', 'age', 'email'):
        assert any(f in l for l in lines)

def test_not_json(tmp_path):
    rc, out = check(tmp_path, '{"name": "A", ')
    assert rc == 1 and out.strip()
    rc, out = check(tmp_path, '[1, 2]')
    assert rc == 1 and out.strip()
