import importlib.util, os, subprocess, sys
sys.dont_write_bytecode = True

def load(path):
    name = os.path.splitext(os.path.basename(path))[0]
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod

import tarfile

def run(*args):
    return subprocess.run(['bash', '/app/backup.sh', *args], capture_output=True, text=True, timeout=20)

def test_creates_archive(tmp_path):
    src = tmp_path / 'photos'
    (src / 'sub').mkdir(parents=True)
    (src / 'a.txt').write_text('A')
    (src / 'sub' / 'b.txt').write_text('B')
    dest = tmp_path / 'out' / 'nested'
    r = run(str(src), str(dest))
    assert r.returncode == 0, r.stderr
    arc = dest / 'photos.tar.gz'
    assert arc.is_file()
    assert r.stdout.strip().endswith('photos.tar.gz')
    with tarfile.open(arc, 'r:gz') as t:
        names = {n.removeprefix('./').rstrip('/') for n in t.getnames()}
        assert {'photos/a.txt', 'photos/sub/b.txt'} <= names
        assert all(n == 'photos' or n.startswith('photos/') for n in names)
        assert t.extractfile('photos/sub/b.txt').read() == b'B'

def test_usage(tmp_path):
    r = run()
    assert r.returncode == 2 and r.stderr.strip()
    r = run(str(tmp_path))
    assert r.returncode == 2 and r.stderr.strip()

def test_missing_source(tmp_path):
    dest = tmp_path / 'dest'
    r = run(str(tmp_path / 'nope'), str(dest))
    assert r.returncode == 1 and r.stderr.strip()
    assert not dest.exists()
