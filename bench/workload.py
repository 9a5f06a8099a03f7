"""One fixed workload through the public API, timed as a whole process: for comparing two trees.

200 single durable writes, 10 batches of 500, a reopen, 5,000 cold and 5,000 warm reads, 20
one-key forgets and one scope forget waited to ``verified``. Run it against two source trees in
turn (``PYTHONPATH=<tree>/src``) and time each process from outside (``/usr/bin/time -v``), A and
B alternated; RESULTS.md ("The core regrouped") has the figures.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import cenotaph

SCOPES = [f"tenant:acme/user:u{i}" for i in range(20)]


def run(data: Path) -> None:
    store = cenotaph.open(data)
    for i in range(200):
        store.write(SCOPES[i % 20], f"k{i}", {"n": i, "text": "some memory text " * 5})
    for b in range(10):
        store.write_many(
            [
                {"scope": SCOPES[i % 20], "key": f"b{b}-{i}", "value": {"n": i, "text": "x" * 120}}
                for i in range(500)
            ]
        )
    store.close()
    store = cenotaph.open(data)
    for _ in range(2):  # cold, then warm
        for b in range(10):
            for i in range(0, 500, 2):
                if store.read(SCOPES[i % 20], f"b{b}-{i}") is None:
                    raise SystemExit(f"b{b}-{i} was written and cannot be read")
    for i in range(20):
        store.forget(SCOPES[i % 20], f"k{i}")
    store.forget(SCOPES[3]).wait(120)
    store.close()


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as tmp:
        run(Path(tmp) / "store")
