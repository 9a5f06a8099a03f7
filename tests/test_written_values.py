"""What a write returns is the store's own copy of the value, equal to what a read parses back.

A batch write builds each record's template from a private copy of a flat value (a dict of atoms,
or an atom) made before it is encoded, instead of parsing its JSON back: the copy must be
exactly what the JSON parses to, type for type, and nothing the caller holds.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from tests.kit.checks import present

import cenotaph

SCOPE = "tenant:acme/user:alice"
FLAT = {"s": "x\u00e9\u2603", "i": 7, "big": 2**62, "f": 1.5, "neg": -0.0, "b": True, "n": None}


def _typed(value: Any) -> Any:
    """A value with the type of every atom beside it (True == 1 and 1.0 == 1 otherwise)."""
    if isinstance(value, dict):
        return {k: _typed(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_typed(v) for v in value]
    return (type(value).__name__, repr(value))


@pytest.mark.parametrize(
    "value", [dict(FLAT), "text", 3, 2.5, False, None, {"nested": {"a": [1, 2]}}, [1, "a"]]
)
def test_a_written_value_is_the_stores_own_and_what_a_read_returns(tmp_path: Path, value: Any) -> None:
    expected = _typed(value)
    with cenotaph.open(tmp_path) as store:
        written = store.write_many([{"scope": SCOPE, "key": "k", "value": value}])[0]
        if isinstance(value, dict):  # the caller changes its own dict after the write
            value["s"] = "changed"
            value["added"] = 1
        assert _typed(written.value) == expected
        warm = present(store.read(SCOPE, "k"))  # from the record the write left in memory
        assert _typed(warm.value) == expected
        if isinstance(written.value, dict):
            assert written.value is not value and warm.value is not written.value
            written.value["s"] = "changed by the caller"
            assert _typed(present(store.read(SCOPE, "k")).value) == expected
    with cenotaph.open(tmp_path) as store:
        assert _typed(present(store.read(SCOPE, "k")).value) == expected  # decrypted and parsed
