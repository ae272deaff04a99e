import importlib.util, os, subprocess, sys
sys.dont_write_bytecode = True

def load(path):
    name = os.path.splitext(os.path.basename(path))[0]
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod

def run(path):
    r = subprocess.run([sys.executable, '/app/report.py', path], capture_output=True, text=True, timeout=10)
    assert r.returncode == 0, r.stderr
    return [' '.join(l.split()) for l in r.stdout.splitlines() if l.strip()]

def test_given_file():
    assert run('/app/expenses.csv') == ['meals: 143.50', 'office: 71.44', 'travel: 282.20']

def test_other_file(tmp_path):
    p = tmp_path / 'e.csv'
    p.write_text('date,category,description,amount\n'
                 '2024-02-01,zoo,"a, b, c",1.10\n'
                 '2024-02-02,books,"Title: ""X, Y""",12.00\n'
                 '2024-02-03,zoo,plain,2.25\n')
    assert run(str(p)) == ['books: 12.00', 'zoo: 3.35']
