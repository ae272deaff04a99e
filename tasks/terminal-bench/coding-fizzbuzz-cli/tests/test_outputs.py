import importlib.util, os, subprocess, sys
sys.dont_write_bytecode = True

def load(path):
    name = os.path.splitext(os.path.basename(path))[0]
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod

def run(n):
    r = subprocess.run([sys.executable, '/app/fizzbuzz.py', str(n)], capture_output=True, text=True, timeout=10)
    assert r.returncode == 0, r.stderr
    return r.stdout.split()

def exp(n):
    return ['FizzBuzz' if i % 15 == 0 else 'Fizz' if i % 3 == 0 else 'Buzz' if i % 5 == 0 else str(i)
            for i in range(1, n + 1)]

def test_fifteen():
    assert run(15) == exp(15)

def test_larger():
    assert run(100) == exp(100)

def test_zero():
    assert run(0) == []
