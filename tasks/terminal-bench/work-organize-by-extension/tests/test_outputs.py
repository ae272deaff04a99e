import os
FILES = ['report.pdf', 'Budget.XLSX', 'photo1.jpg', 'photo2.JPG', 'notes.txt', 'README', 'archive.tar.gz', 'script.py', 'todo.TXT', 'Makefile', 'summary.pdf']

def dest(n):
    ext = n.rsplit('.', 1)[1].lower() if '.' in n else 'other'
    return os.path.join('/app/sorted', ext, n)

def test_inbox_empty():
    assert not os.path.exists('/app/inbox') or os.listdir('/app/inbox') == []

def test_files_moved():
    for n in FILES:
        assert os.path.isfile(dest(n)), dest(n)
        assert open(dest(n)).read() == 'content of %s\n' % n

def test_no_extra_dirs():
    exp = {os.path.basename(os.path.dirname(dest(n))) for n in FILES}
    assert set(os.listdir('/app/sorted')) == exp
