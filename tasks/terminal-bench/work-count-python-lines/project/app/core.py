def run():
    print("running")
    return 0


def stop():
    pass
