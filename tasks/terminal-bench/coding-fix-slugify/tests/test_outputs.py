import importlib.util, os, subprocess, sys
sys.dont_write_bytecode = True

def load(path):
    name = os.path.splitext(os.path.basename(path))[0]
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod

def test_examples():
    s = load('/app/slugify.py').slugify
    assert s('Crème Brûlée!') == 'creme-brulee'
    assert s('  Hello,   World  ') == 'hello-world'
    assert s('Ünïcödé & ASCII -- 2024') == 'unicode-ascii-2024'
    assert s('***') == ''

def test_more():
    s = load('/app/slugify.py').slugify
    assert s('São Paulo') == 'sao-paulo'
    assert s('Señor_Niño') == 'senor-nino'
    assert s('already-a-slug') == 'already-a-slug'
    assert s('C++ & C#') == 'c-c'
    assert s('日本 Tokyo') == 'tokyo'
