import os, stat

def mode(p):
    return stat.S_IMODE(os.stat(p).st_mode)

def test_scripts_executable():
    for n in ('deploy.sh', 'rollback.sh'):
        assert mode('/app/site/bin/' + n) == 0o755

def test_private_locked():
    for dp, dn, fn in os.walk('/app/site/private'):
        assert mode(dp) == 0o700, dp
        for f in fn:
            assert mode(os.path.join(dp, f)) == 0o600, f

def test_others():
    for dp, dn, fn in os.walk('/app/site'):
        if dp.startswith('/app/site/private'):
            continue
        assert mode(dp) == 0o755, dp
        for f in fn:
            p = os.path.join(dp, f)
            if not (dp == '/app/site/bin' and f.endswith('.sh')):
                assert mode(p) == 0o644, p
