import importlib.util, os, subprocess, sys
sys.dont_write_bytecode = True

def load(path):
    name = os.path.splitext(os.path.basename(path))[0]
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod

def count(d):
    r = subprocess.run(['bash', '/app/count_files.sh', str(d)], capture_output=True, text=True, timeout=10)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()

def test_plain(tmp_path):
    for n in ('a', 'b', 'c'):
        (tmp_path / n).write_text('x')
    assert count(tmp_path) == '3'

def test_spaces_and_hidden(tmp_path):
    for n in ('my file.txt', 'another one here', '.hidden', 'x'):
        (tmp_path / n).write_text('x')
    assert count(tmp_path) == '4'

def test_subdirs_ignored(tmp_path):
    (tmp_path / 'sub dir').mkdir()
    (tmp_path / 'sub dir' / 'inner').write_text('x')
    (tmp_path / 'top.txt').write_text('x')
    assert count(tmp_path) == '1'
