#!/bin/bash
set -euo pipefail
cat > /app/calc.py <<'EOF'
import re

_TOK = r"\s*(?:(\d+\.\d*|\.\d+|\d+)|(.))"


def _tokens(s):
    out = []
    pos = 0
    s = s.rstrip()
    while pos < len(s):
        m = re.match(_TOK, s[pos:])
        num, op = m.group(1), m.group(2)
        if num is not None:
            out.append(("num", float(num)))
        elif op in "+-*/()":
            out.append(("op", op))
        else:
            raise ValueError("bad character %r" % op)
        pos += m.end()
    return out


class _Parser:
    def __init__(self, toks):
        self.t, self.i = toks, 0

    def peek(self):
        return self.t[self.i] if self.i < len(self.t) else (None, None)

    def take(self):
        tok = self.peek()
        if tok[0] is None:
            raise ValueError("unexpected end")
        self.i += 1
        return tok

    def expr(self):
        v = self.term()
        while self.peek() in (("op", "+"), ("op", "-")):
            op = self.take()[1]
            r = self.term()
            v = v + r if op == "+" else v - r
        return v

    def term(self):
        v = self.factor()
        while self.peek() in (("op", "*"), ("op", "/")):
            op = self.take()[1]
            r = self.factor()
            if op == "*":
                v = v * r
            else:
                if r == 0:
                    raise ZeroDivisionError("division by zero")
                v = v / r
        return v

    def factor(self):
        kind, val = self.take()
        if kind == "num":
            return val
        if val == "-":
            return -self.factor()
        if val == "+":
            return self.factor()
        if val == "(":
            v = self.expr()
            if self.take() != ("op", ")"):
                raise ValueError("expected )")
            return v
        raise ValueError("unexpected %r" % val)


def evaluate(expr):
    p = _Parser(_tokens(expr))
    v = p.expr()
    if p.i != len(p.t):
        raise ValueError("trailing input")
    return int(v) if float(v).is_integer() else v
EOF
