import importlib.util, os, subprocess, sys
sys.dont_write_bytecode = True

def load(path):
    name = os.path.splitext(os.path.basename(path))[0]
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod

def test_true_cases():
    f = load('/app/palindrome.py').is_palindrome
    for s in ['racecar', 'A man, a plan, a canal: Panama!', 'No lemon, no melon', '12321', 'Was it a car or a cat I saw?']:
        assert f(s) is True, s

def test_false_cases():
    f = load('/app/palindrome.py').is_palindrome
    for s in ['hello', 'ab', 'race a car', '123421', 'palindrome']:
        assert f(s) is False, s

def test_edge_cases():
    f = load('/app/palindrome.py').is_palindrome
    assert f('') is True
    assert f('!!! ,,,') is True
    assert f('Aa') is True
