import os
EXP = {'SERVER_HOST': '0.0.0.0', 'SERVER_PORT': '8443', 'DATABASE_USER': 'app_rw',
       'DATABASE_PASSWORD': 's3cr=t', 'DATABASE_NAME': 'orders', 'CACHE_TTL_SECONDS': '300'}

def lines():
    return [l.strip() for l in open('/app/config.env') if l.strip()]

def test_exists():
    assert os.path.isfile('/app/config.env')

def test_values():
    got = dict(l.split('=', 1) for l in lines())
    assert got == EXP

def test_no_extra_lines():
    assert len(lines()) == len(EXP)
