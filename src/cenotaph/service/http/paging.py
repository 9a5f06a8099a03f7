"""Pagination (``limit``, ``cursor``) for listings.

A cursor is the position of the last item served, sealed (AES-GCM) under a key derived from the
store's key provider for cursors alone (:meth:`ApiKeyRing.service_key`) and bound to the API key
and the listing: opaque to the caller (it never shows the scope or key it encodes, so proxies'
logs of URLs learn nothing), unusable by another key or on another listing, and still valid after
a server restart. Items are ordered by position, so a page boundary survives writes between
pages: nothing is served twice and nothing is skipped except what was written before the
boundary in the meantime.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from cenotaph.operations import Sealer

from ...errors import InvalidValueError
from ..apikeys import ApiKey, ApiKeyRing

__all__ = ["Pager"]

T = TypeVar("T")
PURPOSE = "http-cursors"  # the provider-derived key cursors are sealed under
BAD_CURSOR = "cursor is not one this server issued for this listing and key; start again without cursor"


class Pager:
    def __init__(self, ring: ApiKeyRing) -> None:
        self._sealer = Sealer(ring.service_key(PURPOSE))

    def page(
        self,
        items: Sequence[T],
        position: Callable[[T], list[Any]],
        *,
        limit: int,
        cursor: str | None,
        listing: str,
        key: ApiKey,
    ) -> tuple[list[T], str | None]:
        """The ``limit`` items after ``cursor`` (``items`` sorted by ``position``), and the next
        cursor (None on the last page)."""
        ordered = sorted(items, key=position)
        start = 0
        if cursor is not None:
            after = self._open(cursor, listing, key)
            start = next((n for n, item in enumerate(ordered) if position(item) > after), len(ordered))
        chunk = ordered[start : start + limit]
        more = start + limit < len(ordered)
        return chunk, (self._seal(position(chunk[-1]), listing, key) if more and chunk else None)

    def _aad(self, listing: str, key: ApiKey) -> bytes:
        return f"cenotaph-cursor\0{key.id}\0{listing}".encode()

    def _seal(self, position: list[Any], listing: str, key: ApiKey) -> str:
        blob = self._sealer.seal(json.dumps(position).encode(), self._aad(listing, key))
        return base64.urlsafe_b64encode(blob).decode().rstrip("=")

    def _open(self, cursor: str, listing: str, key: ApiKey) -> list[Any]:
        try:
            blob = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        except (binascii.Error, ValueError):
            raise InvalidValueError(BAD_CURSOR) from None
        opened = self._sealer.open(blob, self._aad(listing, key))
        if opened is None:
            raise InvalidValueError(BAD_CURSOR)
        position = json.loads(opened)
        assert isinstance(position, list)
        return position
