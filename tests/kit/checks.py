"""Small assertions shared by the suites."""

from __future__ import annotations

from typing import TypeVar

T = TypeVar("T")


def present(value: T | None, what: str = "the value") -> T:
    """``value``, which must not be None (a read that must find its record, say)::

    assert present(store.read(scope, "k")).value == "v"
    """
    assert value is not None, f"{what} is missing"
    return value
