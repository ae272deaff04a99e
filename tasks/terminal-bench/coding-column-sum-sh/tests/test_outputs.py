import importlib.util, os, subprocess, sys
sys.dont_write_bytecode = True

def load(path):
    name = os.path.splitext(os.path.basename(path))[0]
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod

def run(*args):
    return subprocess.run(['bash', '/app/colsum.sh', *args], capture_output=True, text=True, timeout=10)

def test_sum(tmp_path):
    p = tmp_path / 'a.csv'
    p.write_text('id,amount,qty\n1,10.25,3\n2,4,1\n3,,7\n4,100.5,0\n')
    r = run(str(p), 'amount')
    assert r.returncode == 0 and r.stdout.strip() == '114.75'
    r = run(str(p), 'qty')
    assert r.returncode == 0 and r.stdout.strip() == '11.00'

def test_first_and_last_column(tmp_path):
    p = tmp_path / 'b.csv'
    p.write_text('x,y\n1,2\n3,4\n')
    assert run(str(p), 'x').stdout.strip() == '4.00'
    assert run(str(p), 'y').stdout.strip() == '6.00'

def test_errors(tmp_path):
    p = tmp_path / 'c.csv'
    p.write_text('x,y\n1,2\n')
    r = run(str(p), 'zzz')
    assert r.returncode == 1 and r.stderr.strip() and not r.stdout.strip()
    r = run(str(p))
    assert r.returncode == 2 and r.stderr.strip()
