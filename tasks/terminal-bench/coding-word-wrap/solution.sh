#!/bin/bash
set -euo pipefail
cat > /app/wrap.py <<'EOF'
def wrap(text, width):
    if width < 1:
        raise ValueError("width must be >= 1")
    lines, cur = [], ""
    for word in text.split():
        while len(word) > width:
            if cur:
                lines.append(cur)
                cur = ""
            lines.append(word[:width])
            word = word[width:]
        if not word:
            continue
        if not cur:
            cur = word
        elif len(cur) + 1 + len(word) <= width:
            cur += " " + word
        else:
            lines.append(cur)
            cur = word
    if cur:
        lines.append(cur)
    return lines
EOF
