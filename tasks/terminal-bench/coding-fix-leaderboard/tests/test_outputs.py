import importlib.util, os, subprocess, sys
sys.dont_write_bytecode = True

def load(path):
    name = os.path.splitext(os.path.basename(path))[0]
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod

def run(path):
    r = subprocess.run([sys.executable, '/app/leaderboard.py', str(path)], capture_output=True, text=True, timeout=10)
    assert r.returncode == 0, r.stderr
    return [' '.join(l.split()) for l in r.stdout.splitlines() if l.strip()]

def test_given_file():
    assert run('/app/scores.csv') == ['1. cat 1000', '2. amy 120', '3. bob 95', '4. dan 95', '5. eve 12', '6. zed 7']

def test_other_file(tmp_path):
    p = tmp_path / 's.csv'
    p.write_text('name,score\nx,9\nw,10\nv,9\nu,100\n')
    assert run(p) == ['1. u 100', '2. w 10', '3. v 9', '4. x 9']
