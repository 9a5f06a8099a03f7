"""The child side of :mod:`tests.kit.proc`: ``python -m tests.kit.child SCENARIO``.

Reads the scenario's keyword arguments as JSON from the first line of stdin (the rest of stdin is
the scenario's), runs it, and prints its return value as one JSON line (``null`` for None). Stdlib only
until the scenario's own module is imported (the oracles import nothing of cenotaph).
"""

from __future__ import annotations

import importlib
import json
import sys

from tests.kit.scenarios import SCENARIOS, say


def main(argv: list[str]) -> None:
    (name,) = argv
    module, function = SCENARIOS[name].split(":")
    args = json.loads(sys.stdin.readline())
    result = getattr(importlib.import_module(module), function)(**args)
    say(json.dumps(result))  # its last line, ``null`` for None


if __name__ == "__main__":
    main(sys.argv[1:])
