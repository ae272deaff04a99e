import os
EMP = [('E01', 'Mia Chen', 'engineering', '98000'), ('E02', 'Omar Haddad', 'sales', '61000'), ('E03', 'Lena Vogel', 'engineering', '105000'), ('E04', 'Raj Patel', 'support', '52000'), ('E05', 'Ines Duarte', 'sales', '64000'), ('E06', 'Tom Berg', 'finance', '77000'), ('E07', 'Aiko Sato', 'engineering', '91000'), ('E08', 'Kofi Mensah', 'support', '50500'), ('E09', 'Sara Lind', 'finance', '80500'), ('E10', 'Luis Ortega', 'sales', '59000')]
HEADER = 'id,name,department,salary'

def test_files():
    assert os.path.isdir('/app/by_dept')
    assert sorted(os.listdir('/app/by_dept')) == sorted({e[2] + '.csv' for e in EMP})

def test_contents():
    for dept in {e[2] for e in EMP}:
        lines = [l.strip() for l in open('/app/by_dept/%s.csv' % dept) if l.strip()]
        assert lines[0] == HEADER
        assert lines[1:] == [','.join(e) for e in EMP if e[2] == dept]

def test_original_unchanged():
    lines = [l.strip() for l in open('/app/employees.csv') if l.strip()]
    assert lines == [HEADER] + [','.join(e) for e in EMP]
