import os, tarfile
CFG = {'config/app.yaml': 'name: shop\nport: 8000\n', 'config/app.yaml.bak': 'name: shop\nport: 7000\n', 'config/db/primary.ini': '[db]\nhost=db1\n', 'config/db/primary.ini.bak': '[db]\nhost=db0\n', 'config/db/replica.ini': '[db]\nhost=db2\n', 'config/nginx/site.conf': 'server { listen 80; }\n', 'config/old.bak': 'stale\n', 'logs/today.log': 'not part of the backup\n'}

def members():
    with tarfile.open('/app/backup.tar.gz', 'r:gz') as t:
        return {m.name.rstrip('/').removeprefix('./'): m for m in t.getmembers()}

def test_archive_is_gzip_tar():
    assert os.path.isfile('/app/backup.tar.gz')
    with open('/app/backup.tar.gz', 'rb') as f:
        assert f.read(2) == b'\x1f\x8b'
    members()

def test_wanted_files_present():
    m = members()
    with tarfile.open('/app/backup.tar.gz', 'r:gz') as t:
        for p, c in CFG.items():
            if p.startswith('config/') and not p.endswith('.bak'):
                assert p in m and m[p].isfile(), p
                assert t.extractfile(m[p]).read().decode() == c

def test_nothing_unwanted():
    for name, m in members().items():
        assert name == 'config' or name.startswith('config/'), name
        assert not name.endswith('.bak'), name

def test_originals_kept():
    for p, c in CFG.items():
        assert open('/app/' + p).read() == c
