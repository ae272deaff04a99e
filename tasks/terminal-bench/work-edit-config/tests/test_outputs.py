ORIG = '# service configuration\nname=inventory-api\nhost=0.0.0.0\nport=5000\ndebug=true\n# port used by the admin console, do not touch\nadmin_port=5001\nworkers=4\n'

def kv():
    out = {}
    for l in open('/app/app.conf'):
        l = l.strip()
        if l and not l.startswith('#'):
            k, v = l.split('=', 1)
            assert k.strip() not in out, 'duplicate key ' + k
            out[k.strip()] = v.strip()
    return out

def test_port():
    c = kv()
    assert c['port'] == '8080'
    assert c['admin_port'] == '5001'

def test_debug_and_log_level():
    c = kv()
    assert c['debug'] == 'false'
    assert c['log_level'] == 'info'

def test_rest_unchanged():
    lines = [l.strip() for l in open('/app/app.conf')]
    for l in ORIG.splitlines():
        if not l.startswith(('port=', 'debug=')):
            assert l.strip() in lines, l
