import os

def test_exists():
    assert os.path.isfile('/app/bad_files.txt')

def test_corrupted_listed():
    got = {l.strip() for l in open('/app/bad_files.txt') if l.strip()}
    assert {'beta.bin', 'epsilon.dat'} <= got

def test_exact():
    got = [l.strip() for l in open('/app/bad_files.txt') if l.strip()]
    assert got == ['beta.bin', 'epsilon.dat', 'zeta.dat']
