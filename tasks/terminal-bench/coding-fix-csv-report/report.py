import sys

totals = {}
lines = open(sys.argv[1]).read().splitlines()
for line in lines[1:]:
    date, category, description, amount = line.split(",")
    totals[category] = totals.get(category, 0) + float(amount)
for cat in totals:
    print("%s: %.2f" % (cat, totals[cat]))
