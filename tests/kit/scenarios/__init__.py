"""The scenarios a child process of :mod:`tests.kit.proc` can run, by name.

Each maps to ``module:function``; the function takes the JSON arguments as keywords, may print
lines with :func:`say` and returns a JSON-able value (printed as its last line). Nothing here
asserts: the tests do. Imported by the child before anything else, so stdlib only.
"""

from __future__ import annotations

import os

SCENARIOS = {
    # races (tests/test_races.py): processes released together by a go file, JSON out
    "race-writer": "tests.kit.scenarios.races:race_writer",
    "race-forgetter": "tests.kit.scenarios.races:race_forgetter",
    # crashes: killed by the parent at a moment, or by a fault point (CENOTAPH_FAULT)
    "crash-writer": "tests.kit.scenarios.crash:crash_writer",
    "crash-after-forget": "tests.kit.scenarios.crash:crash_after_forget",
    "crash-in-forget": "tests.kit.scenarios.crash:crash_in_forget",
    "erasure-forget": "tests.kit.scenarios.crash:erasure_forget",
    "restore": "tests.kit.scenarios.crash:restore",
    "group-writer": "tests.kit.scenarios.crash:group_writer",
    # one store operation from a second process, at a location (tests.kit.locations.Location)
    "forget": "tests.kit.scenarios.store_ops:forget",
    "forget-subject": "tests.kit.scenarios.store_ops:forget_subject",
    "write": "tests.kit.scenarios.store_ops:write",
    "churn": "tests.kit.scenarios.store_ops:churn",
    # byte-level oracles, independent of cenotaph (tests/kit/oracle.py)
    "oracle-sql": "tests.kit.scenarios.oracle:sql",
    "oracle-write-sql": "tests.kit.scenarios.oracle:write_sql",
    "oracle-copy-file": "tests.kit.scenarios.oracle:copy_file",
    "oracle-residue": "tests.kit.scenarios.oracle:residue",
    "oracle-scan": "tests.kit.scenarios.oracle:scan",
    "hold-reader": "tests.kit.scenarios.oracle:hold_reader",
    # PostgreSQL app servers on one schema (tests/postgres/_scenarios.py)
    "pg-race-forgetter": "tests.postgres._scenarios:race_forgetter",
    "pg-race-writer": "tests.postgres._scenarios:race_writer",
    "pg-forget-subject": "tests.postgres._scenarios:forget_subject",
    "pg-reader": "tests.postgres._scenarios:reader",
    "pg-finish": "tests.postgres._scenarios:finish",
}


def say(line: str) -> None:
    """Print one line with one ``os.write``: a SIGKILL can stop us between lines, never inside one."""
    data = (line + "\n").encode()
    while data:
        data = data[os.write(1, data) :]
