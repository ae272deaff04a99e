import importlib.util, os, subprocess, sys
sys.dont_write_bytecode = True

def load(path):
    name = os.path.splitext(os.path.basename(path))[0]
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod

def wc(tmp_path, text):
    p = tmp_path / 'in.txt'
    p.write_text(text)
    r = subprocess.run([sys.executable, '/app/wordcount.py', str(p)], capture_output=True, text=True, timeout=10)
    assert r.returncode == 0, r.stderr
    return r.stdout.split()

def exp(text):
    return [str(text.count('\n')), str(len(text.split())), str(len(text))]

def test_simple(tmp_path):
    t = 'one two three\nfour five\n'
    assert wc(tmp_path, t) == exp(t)

def test_spaces_and_tabs(tmp_path):
    t = 'alpha   beta\t\tgamma\n  delta  \n'
    assert wc(tmp_path, t) == exp(t)

def test_blank_lines_no_trailing_newline(tmp_path):
    t = '\n\nfirst line\n\n   \nlast words here'
    assert wc(tmp_path, t) == exp(t)
