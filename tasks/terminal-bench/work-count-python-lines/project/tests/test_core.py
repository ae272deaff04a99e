from app.core import run


def test_run():
    assert run() == 0
