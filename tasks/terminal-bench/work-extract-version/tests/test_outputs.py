import os

def test_extracted():
    base = '/app/extracted/toolkit-3.7.2'
    assert os.path.isfile(base + '/src/main.py')
    assert os.path.isfile(base + '/docs/guide.txt')
    assert open(base + '/src/util.py').read().startswith('def add')

def test_version():
    assert open('/app/version.txt').read().strip() == '3.7.2'

def test_py_count():
    assert open('/app/py_count.txt').read().strip() == '4'
