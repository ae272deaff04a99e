import os
KEPT = ['backup-2024-01-30.tar.gz', 'backup-2024-02-21.tar.gz', 'backup-2024-03-31.tar.gz', 'backup-2024-04-28.tar.gz', 'backup-2024-05-04.tar.gz', 'backup-2024-05-07.tar.gz', 'backup-2024-05-10.tar.gz', 'backup-2024-05-16.tar.gz']
DELETED = ['backup-2024-01-03.tar.gz', 'backup-2024-01-12.tar.gz', 'backup-2024-01-18.tar.gz', 'backup-2024-01-24.tar.gz', 'backup-2024-02-04.tar.gz', 'backup-2024-02-10.tar.gz', 'backup-2024-02-13.tar.gz', 'backup-2024-02-16.tar.gz', 'backup-2024-03-01.tar.gz', 'backup-2024-03-10.tar.gz', 'backup-2024-03-16.tar.gz', 'backup-2024-03-22.tar.gz', 'backup-2024-04-05.tar.gz', 'backup-2024-04-08.tar.gz', 'backup-2024-04-13.tar.gz', 'backup-2024-04-18.tar.gz', 'backup-2024-04-23.tar.gz']

def test_kept():
    have = set(os.listdir('/app/backups'))
    for n in KEPT + ['README.txt']:
        assert n in have, n

def test_deleted_removed():
    have = set(os.listdir('/app/backups'))
    assert not (set(DELETED) & have)

def test_deleted_list():
    got = [l.strip() for l in open('/app/deleted.txt') if l.strip()]
    assert got == DELETED
