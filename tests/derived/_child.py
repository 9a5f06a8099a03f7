"""A second process for the derived suite: ``python tests/derived/_child.py ROLE ARGS...``.

Prints one JSON document on stdout. Roles:

- ``forget DIR SCOPE KEY|- MODE PURGE``: ``store.forget`` (``-`` = the whole scope); PURGE is 0/1 (auto-purge);
- ``forget-subject DIR SUBJECT``: ``store.forget_subject`` (auto-purge off);
- ``write DIR SCOPE KEY VALUE_JSON``: ``store.write``;
- ``scan DIR NEEDLES_JSON``: read every file under DIR (a process without the store open, so the reads
  cannot drop another process's SQLite locks) and report which needles occur where.

Nothing here asserts; the tests do. :func:`scan_directory` is also imported by the tests.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import ahocorasick


def scan_directory(directory: Path, needles: dict[str, list[bytes]]) -> dict[str, object]:
    """Every ``(needle name, relative path)`` whose bytes occur in a file under ``directory``."""
    automaton = ahocorasick.Automaton()
    for name, items in needles.items():
        for item in items:
            assert item, name
            automaton.add_word(item.decode("latin-1"), name)
    automaton.make_automaton()
    matches: set[tuple[str, str]] = set()
    files = size = 0
    for path in sorted(p for p in Path(directory).rglob("*") if p.is_file()):
        data = path.read_bytes()
        files += 1
        size += len(data)
        for _, name in automaton.iter(data.decode("latin-1")):
            matches.add((name, str(path.relative_to(directory))))
    return {"files": files, "bytes": size, "matches": [list(m) for m in sorted(matches)]}


def main(argv: list[str]) -> object:
    role, directory, *rest = argv
    if role == "scan":
        raw = json.loads(Path(rest[0]).read_text())
        needles = {name: [bytes.fromhex(h) for h in items] for name, items in raw.items()}
        return scan_directory(Path(directory), needles)

    import cenotaph

    if role == "forget":
        scope, key, mode, purge = rest
        with cenotaph.open(directory, auto_purge=purge == "1") as store:
            req = store.forget(scope, None if key == "-" else key, mode=mode)
            return {"id": req.id, "version": req.version, "state": req.status().state}
    if role == "forget-subject":
        (subject,) = rest
        with cenotaph.open(directory, auto_purge=False) as store:
            req = store.forget_subject(subject)
            return {"id": req.id, "version": req.version, "state": req.status().state}
    if role == "write":
        scope, key, value = rest
        with cenotaph.open(directory, auto_purge=False) as store:
            rec = store.write(scope, key, json.loads(value))
            return {"id": rec.id, "version": rec.version}
    raise SystemExit(f"unknown role {role!r}")


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1:])))
