def slugify(text):
    out = ""
    for ch in text.lower():
        if ch.isalnum():
            out += ch
        elif ch == " ":
            out += "-"
    return out
