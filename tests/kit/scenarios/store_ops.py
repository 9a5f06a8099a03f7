"""One store operation from a second process, on a store's location (a
:class:`tests.kit.locations.Location` as JSON, or a data directory): what another process of the
same deployment does while the test's own stores stay open. Each returns what the call returned.
"""

from __future__ import annotations

import time
from typing import Any

from tests.kit.locations import open_location


def forget(
    location: Any,
    scope: str,
    key: str | None = None,
    mode: str = "compliance",
    auto_purge: str = "off",
    close: bool = True,
) -> dict[str, Any]:
    """``store.forget(scope, key, mode=mode)`` (``key`` None: the whole scope). ``close=False``
    leaves the store to the interpreter's exit, as a process that just ends would."""
    store = open_location(location, auto_purge=auto_purge)
    request = store.forget(scope, key, mode=mode)
    out = {"id": request.id, "version": request.version, "state": request.status().state}
    if close:
        store.close()
    return out


def forget_subject(location: Any, subject: str) -> dict[str, Any]:
    with open_location(location, auto_purge="off") as store:
        request = store.forget_subject(subject)
        return {"id": request.id, "version": request.version, "state": request.status().state}


def write(location: Any, scope: str, key: str, value: Any) -> dict[str, Any]:
    with open_location(location, auto_purge="off") as store:
        record = store.write(scope, key, value)
        return {"id": record.id, "version": record.version}


def churn(location: Any, scope: str, seconds: float) -> int:
    """Write, forget (compliance) and every 5th time purge in ``scope`` for ``seconds``: an honest
    neighbour process at work. How many rounds it did."""
    store = open_location(location, auto_purge="off")
    end, i = time.time() + seconds, 0
    while time.time() < end:
        i += 1
        store.write(scope, f"k{i}", "v")
        store.forget(scope, f"k{i}")
        if i % 5 == 0:
            store.purge()
    store.close()
    return i
