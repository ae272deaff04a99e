import importlib.util, os, subprocess, sys
sys.dont_write_bytecode = True

def load(path):
    name = os.path.splitext(os.path.basename(path))[0]
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod

import sqlite3

def db():
    conn = sqlite3.connect(':memory:')
    conn.executescript(open('/app/schema.sql').read())
    return conn

def test_top_three():
    q = load('/app/queries.py')
    assert [tuple(r) for r in q.top_customers(db(), 3)] == [('Eli', 12000), ('Chen', 4050), ('Ana', 4000)]

def test_all_paid_customers():
    q = load('/app/queries.py')
    got = [tuple(r) for r in q.top_customers(db(), 10)]
    assert got == [('Eli', 12000), ('Chen', 4050), ('Ana', 4000), ('Dara', 4000), ('Ben', 1000)]

def test_other_data():
    q = load('/app/queries.py')
    conn = db()
    conn.execute("INSERT INTO orders VALUES (11, 2, 50000, 'paid')")
    conn.execute("INSERT INTO customers VALUES (7, 'Gus', 'US')")
    assert [tuple(r) for r in q.top_customers(conn, 1)] == [('Ben', 51000)]
