import importlib.util, os, subprocess, sys
sys.dont_write_bytecode = True

def load(path):
    name = os.path.splitext(os.path.basename(path))[0]
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod

def todo(tmp_path, *args):
    env = dict(os.environ, TODO_FILE=str(tmp_path / 'todo.json'))
    return subprocess.run([sys.executable, '/app/todo.py', *args], capture_output=True, text=True,
                          env=env, timeout=10)

def test_add_and_list_still_work(tmp_path):
    assert todo(tmp_path, 'add', 'buy', 'milk').returncode == 0
    assert todo(tmp_path, 'add', 'call', 'mum').returncode == 0
    out = todo(tmp_path, 'list').stdout.splitlines()
    assert out == ['[ ] 1 buy milk', '[ ] 2 call mum']

def test_done_marks_item(tmp_path):
    todo(tmp_path, 'add', 'buy', 'milk')
    todo(tmp_path, 'add', 'call', 'mum')
    todo(tmp_path, 'add', 'pay', 'rent')
    r = todo(tmp_path, 'done', '2')
    assert r.returncode == 0 and r.stdout.strip() == ''
    out = todo(tmp_path, 'list').stdout.splitlines()
    assert out == ['[ ] 1 buy milk', '[x] 2 call mum', '[ ] 3 pay rent']

def test_done_unknown_id(tmp_path):
    todo(tmp_path, 'add', 'buy', 'milk')
    before = (tmp_path / 'todo.json').read_text()
    for bad in ('7', 'abc'):
        r = todo(tmp_path, 'done', bad)
        assert r.returncode == 1
        assert r.stderr.strip() != ''
    assert (tmp_path / 'todo.json').read_text() == before
    assert todo(tmp_path, 'list').stdout.splitlines() == ['[ ] 1 buy milk']
