"""Where a store lives, as data a child process can be handed (no pytest here: children import it)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import cenotaph
from cenotaph import Store

KEYRING_OPTION = "keyring"  # a Location's JSON-able stand-in for key_provider=LocalKeyring(path)


@dataclass(frozen=True)
class Location:
    """Where a store lives: ``cenotaph.open(target, **options)`` opens it (JSON-able, so a child
    process can open it too)."""

    target: str
    options: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"target": self.target, "options": dict(self.options)}


def open_location(location: Location | Mapping[str, Any] | str, **options: Any) -> Store:
    """Open a store at ``location`` (a :class:`Location`, its ``to_json()`` or a bare target such
    as a data directory), with ``options``."""
    if isinstance(location, str):
        location = Location(location)
    elif not isinstance(location, Location):
        location = Location(str(location["target"]), dict(location["options"]))
    chosen = {**location.options, **options}
    if KEYRING_OPTION in chosen:  # a server store has no data directory for its default keyring
        chosen["key_provider"] = cenotaph.LocalKeyring(Path(chosen.pop(KEYRING_OPTION)))
    return cenotaph.open(location.target, **chosen)
