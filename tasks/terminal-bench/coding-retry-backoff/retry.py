import time


def retry(func, retries=3, base_delay=1.0, exceptions=(Exception,), sleep=time.sleep):
    """Call func, retrying with exponential backoff. TODO: implement."""
    return func()
