MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August",
          "September", "October", "November", "December"]


def normalize(s):
    if "-" in s:
        return s
    if "/" in s:
        m, d, y = s.split("/")
        return "%s-%s-%s" % (y, m, d)
    if "," in s:
        name, rest = s.split(" ", 1)
        day, year = rest.split(",")
        month = MONTHS.index(name)
        return "%s-%02d-%02d" % (year.strip(), month, int(day))
    return "%s-%s-%s" % (s[0:4], s[4:6], s[6:8])
