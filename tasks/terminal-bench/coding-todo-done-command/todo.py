#!/usr/bin/env python3
"""Tiny to-do list. Usage: todo.py add TEXT | todo.py list"""
import json
import os
import sys

PATH = os.environ.get("TODO_FILE", "/app/todo.json")


def load():
    if not os.path.exists(PATH):
        return []
    with open(PATH) as f:
        return json.load(f)


def save(items):
    with open(PATH, "w") as f:
        json.dump(items, f, indent=2)


def main(argv):
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    items = load()
    if argv[0] == "add":
        text = " ".join(argv[1:])
        new_id = max([i["id"] for i in items], default=0) + 1
        items.append({"id": new_id, "text": text, "done": False})
        save(items)
        print(new_id)
    elif argv[0] == "list":
        for i in items:
            print("[ ] %d %s" % (i["id"], i["text"]))
    else:
        print("unknown command: " + argv[0], file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
