import os

def expected():
    with open('/app/logs/app.log') as f:
        return sum(1 for l in f if l.split()[1:2] == ['ERROR'])

def test_file_exists():
    assert os.path.isfile('/app/error_count.txt')

def test_count():
    with open('/app/error_count.txt') as f:
        assert f.read().strip() == str(expected())
