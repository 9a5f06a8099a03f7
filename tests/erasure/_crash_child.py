"""Child process of test_crash_points.py: ``python _crash_child.py DATA_DIR MODE``.

Opens the store on DATA_DIR and compliance-forgets subject tenant:t/user:a. ``CENOTAPH_FAULT`` (set
by the parent) makes this process SIGKILL itself at that step.

MODE ``auto``: the default store (the forget purges before it returns); prints ``returned ID STATE``
if the forget returned. MODE ``explicit``: ``auto_purge=False``; prints ``returned ID STATE`` after
the forget, then runs ``purge()`` and prints ``purged`` if that returned.

Each line goes out in one ``os.write``, so a SIGKILL never leaves half a line.
"""

from __future__ import annotations

import os
import sys

import cenotaph


def say(line: str) -> None:
    os.write(1, (line + "\n").encode())


def main() -> None:
    data, mode = sys.argv[1], sys.argv[2]
    store = cenotaph.open(data, auto_purge=(mode == "auto"))
    say("opened")
    request = store.forget_subject("tenant:t/user:a")
    say(f"returned {request.id} {request.status().state}")
    if mode == "explicit":
        store.purge()
        say("purged")
    store.close()


if __name__ == "__main__":
    main()
