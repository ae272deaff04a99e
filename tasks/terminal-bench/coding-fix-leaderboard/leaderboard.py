import csv
import sys

with open(sys.argv[1], newline="") as f:
    rows = [(r["name"], r["score"]) for r in csv.DictReader(f)]
rows.sort(key=lambda r: r[1], reverse=True)
for i, (name, score) in enumerate(rows, 1):
    print("%d. %s %s" % (i, name, score))
