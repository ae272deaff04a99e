import gzip, hashlib, os
HASHES = {'logs/api.log': '2f193ee6b87f2760686aec65411e7df43c91c4ca0c9e37c728d1d1e7f567ddbb', 'logs/worker.log': '2760d9da70ef8ea2b7a730eb1209466a06754a53df3e147073a3303d907e8980', 'logs/cron.log': '37241f24f9988def08f4a8f55fd160857959b98adc73f628f6f876d387c27ab6'}

def test_originals_gone():
    for p in HASHES:
        assert not os.path.exists('/app/' + p), p

def test_gz_content():
    for p, h in HASHES.items():
        with gzip.open('/app/' + p + '.gz') as f:
            assert hashlib.sha256(f.read()).hexdigest() == h

def test_others_untouched():
    assert open('/app/logs/notes.txt').read() == 'keep me plain\n'
    with gzip.open('/app/logs/archive/old.log.gz') as f:
        assert f.read() == b'ancient\n'
    assert not os.path.exists('/app/logs/archive/old.log.gz.gz')
    assert not os.path.exists('/app/logs/notes.txt.gz')
