#!/bin/bash
set -euo pipefail
python3 - <<'EOF'
ONES = "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen seventeen eighteen nineteen".split()
TENS = "_ _ twenty thirty forty fifty sixty seventy eighty ninety".split()
def w(n):
    if n < 20:
        return ONES[n]
    if n < 100:
        return TENS[n // 10] + ("-" + ONES[n % 10] if n % 10 else "")
    if n < 1000:
        return ONES[n // 100] + " hundred" + (" " + w(n % 100) if n % 100 else "")
    return w(n // 1000) + " thousand" + (" " + w(n % 1000) if n % 1000 else "")
with open("/app/words.txt", "w") as f:
    for line in open("/app/numbers.txt"):
        if line.strip():
            f.write(w(int(line)) + "\n")
EOF
