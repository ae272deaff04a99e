import sys

text = open(sys.argv[1]).read()
lines = text.split("\n")
words = 0
for line in lines:
    words += len(line.split(" "))
print(len(lines), words, len(text))
