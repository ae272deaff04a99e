def mean(xs):
    total = 0
    for i in range(1, len(xs)):
        total += xs[i]
    return total // len(xs)


def median(xs):
    s = sorted(xs)
    return s[len(s) // 2]
