"""LangGraph search filters, evaluated on decrypted item values.

Semantics follow LangGraph's persistent stores (SqliteStore, PostgresStore): a filter key is a
field name or a dotted path into nested objects (``"user.access-level"``) made of letters, digits,
``_``, ``.`` and ``-`` (anything else is refused with ``ValueError("Invalid filter key ...")``, as
SqliteStore does); a plain value means equality (``None`` also matches a missing field), and
``$eq``, ``$ne``, ``$gt``, ``$gte``, ``$lt``, ``$lte`` compare numbers as numbers and strings as
strings. A field that is missing never satisfies an operator, ``$ne`` included, as in SQL.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["compile_filter"]

_KEY = re.compile(r"^[a-zA-Z0-9_.-]+$")
_MISSING = object()

Predicate = Callable[[Mapping[str, Any]], bool]


def _lookup(value: Any, path: str) -> Any:
    if isinstance(value, Mapping) and path in value:
        return value[path]
    for part in path.split("."):
        if not isinstance(value, Mapping) or part not in value:
            return _MISSING
        value = value[part]
    return value


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _equal(found: Any, wanted: Any) -> bool:
    if wanted is None:
        return found is _MISSING or found is None
    if found is _MISSING:
        return False
    a, b = _number(found), _number(wanted)
    if a is not None and b is not None:
        return a == b  # 10 == 10.0; NaN equals nothing
    if isinstance(wanted, bool) or isinstance(found, bool):
        return type(found) is type(wanted) and found == wanted
    return bool(found == wanted)


def _ordered(found: Any, wanted: Any, compare: Callable[[Any, Any], bool]) -> bool:
    a, b = _number(found), _number(wanted)
    if a is not None and b is not None:
        return compare(a, b)
    if isinstance(found, str) and isinstance(wanted, str):
        return compare(found, wanted)
    return False


_ORDER: dict[str, Callable[[Any, Any], bool]] = {
    "$gt": lambda a, b: a > b,
    "$gte": lambda a, b: a >= b,
    "$lt": lambda a, b: a < b,
    "$lte": lambda a, b: a <= b,
}


def _holds(op: str, found: Any, wanted: Any) -> bool:
    if op == "$eq":
        return _equal(found, wanted)
    if op == "$ne":
        if wanted is None:
            return found is not _MISSING and found is not None
        return found is not _MISSING and not _equal(found, wanted)
    if found is _MISSING:
        return False
    return _ordered(found, wanted, _ORDER[op])


def compile_filter(filter: Mapping[str, Any] | None) -> Predicate:
    """A predicate over item values; raises ``ValueError`` for a key or operator it cannot apply."""
    conditions: list[tuple[str, str, Any]] = []
    for key, wanted in (filter or {}).items():
        if not isinstance(key, str) or not _KEY.match(key):
            raise ValueError(
                f"Invalid filter key: {key!r}. Filter keys must contain only alphanumeric characters, "
                "underscores, dots, and hyphens."
            )
        if isinstance(wanted, Mapping) and any(isinstance(k, str) and k.startswith("$") for k in wanted):
            for op, operand in wanted.items():
                if op not in ("$eq", "$ne", *_ORDER):
                    raise ValueError(f"Unsupported operator: {op}")
                conditions.append((key, op, operand))
        else:
            conditions.append((key, "$eq", wanted))

    def matches(value: Mapping[str, Any]) -> bool:
        return all(_holds(op, _lookup(value, key), wanted) for key, op, wanted in conditions)

    return matches
