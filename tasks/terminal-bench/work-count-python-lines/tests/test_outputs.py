def test_lines():
    assert open('/app/py_lines.txt').read().strip() == '18'

def test_files():
    assert open('/app/py_files.txt').read().strip() == '5'
