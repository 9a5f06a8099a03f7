"""Child process of the crash tests: ``python _crash_child.py DATA_DIR MODE [TARGET]``.

Opens the store on DATA_DIR and compliance-forgets subject tenant:t/user:a (TARGET ``scope``:
forgets that scope's subtree instead). ``CENOTAPH_FAULT`` (set by the parent) makes this process
SIGKILL itself at that step (``point@n``: the n-th time it is reached).

MODE ``auto``: ``auto_purge="sync"`` (the forget purges before it returns); prints ``returned ID
STATE`` if the forget returned. MODE ``explicit``: ``auto_purge="off"``; prints ``returned ID
STATE`` after the forget, then runs ``purge()`` and prints ``purged`` if that returned. MODE
``chunked``: like ``explicit``, with forgets chunked 3 records at a time (so a forget of more than
3 records commits its head first and its records in chunks, and a purge removes rows one record
per transaction). MODE ``background``: the default store (the purge runs in its worker thread);
prints ``returned ID STATE``, then waits for the request and prints ``verified``.

Each line goes out in one ``os.write``, so a SIGKILL never leaves half a line.
"""

from __future__ import annotations

import os
import sys

import cenotaph
from cenotaph.erasure import ledger

SUBJECT = "tenant:t/user:a"
MODES = {"auto": "sync", "explicit": "off", "chunked": "off", "background": "background"}


def say(line: str) -> None:
    os.write(1, (line + "\n").encode())


def main() -> None:
    data, mode = sys.argv[1], sys.argv[2]
    target = sys.argv[3] if len(sys.argv) > 3 else "subject"
    if mode == "chunked":
        ledger.CHUNK_RECORDS = 3
    store = cenotaph.open(data, auto_purge=MODES[mode])
    say("opened")
    request = store.forget_subject(SUBJECT) if target == "subject" else store.forget(SUBJECT)
    say(f"returned {request.id} {request.status().state}")
    if mode in ("explicit", "chunked"):
        store.purge()
        say("purged")
    elif mode == "background":
        request.wait(timeout=120)
        say("verified")
    store.close()


if __name__ == "__main__":
    main()
