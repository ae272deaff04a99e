import importlib.util, os, subprocess, sys
sys.dont_write_bytecode = True

def load(path):
    name = os.path.splitext(os.path.basename(path))[0]
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod

import pytest

def test_formats():
    n = load('/app/dates.py').normalize
    assert n('2024-03-05') == '2024-03-05'
    assert n('05/03/2024') == '2024-03-05'
    assert n('March 5, 2024') == '2024-03-05'
    assert n('20240305') == '2024-03-05'

def test_more_dates():
    n = load('/app/dates.py').normalize
    assert n('  31/12/1999 ') == '1999-12-31'
    assert n('January 1, 2000') == '2000-01-01'
    assert n('December 25, 2023') == '2023-12-25'
    assert n('29/02/2024') == '2024-02-29'
    assert n('19991231') == '1999-12-31'

def test_invalid():
    n = load('/app/dates.py').normalize
    for bad in ['31/02/2024', '2023-02-29', 'Smarch 3, 2024', '2024/03/05', '', 'yesterday', '13/13/2024']:
        with pytest.raises(ValueError):
            n(bad)
