"""What the store's messages tell a caller to do, and how each surface says it in its own words.

The store writes every message once, in the words of its Python API: a remedy is named by the
call or argument that performs it (``store.purge()``, ``store.reauthorize(...)``,
``include_ancestors=True``). That spelling is the remedy's stable id: it is public API already, a
library caller acts on it as written, and :data:`REMEDIES` lists every one the store's messages
use (a test scans the source to keep the two equal). A surface whose callers cannot make library
calls (the command line, the HTTP API and its console, MCP) keeps its own table from each id to
its own words, and passes every store message it shows through a :class:`Spelling` of it:

>>> say = Spelling({"store.purge()": "`POST /v1/purge`"})
>>> say("the WAL is still pending: run store.purge()")
'the WAL is still pending: run `POST /v1/purge`'

Only whole spellings are replaced, longest first, in one pass (``store.purge()`` whole, never as
``store.`` + ``purge()``), and never right after a word character, ``.``, ``-``, ``:``, ``/`` or
a quote, so a caller's own scope or key quoted in a message (``'tenant:derived_from'``) stays as
it is. A surface's table may leave out the remedies its callers can never meet; it cannot name
one the store does not use.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, TypeVar

from .errors import InvalidValueError

__all__ = ["REMEDIES", "Spelling"]

T = TypeVar("T")

REMEDIES: frozenset[str] = frozenset(
    {
        # lifting a forget
        "store.reauthorize(scope, subject=...)",
        "store.reauthorize(...)",
        "store.reauthorize()",
        "store.cenotaph.reauthorize(...)",  # the LangGraph integration's own store
        # carrying an erasure forward, and proving it
        "store.purge()",
        "purge()",
        "rotate_keys()",
        "release_backup()",
        "store.check_integrity()",
        "store.attest()",
        # finding requests and backups
        "store.erasure(request_id)",
        "store.erasures()",
        "store.backups()",
        "store.backup()",
        "store.consumers()",
        "store.register_consumer()",
        "cenotaph.restore()",
        # writing and forgetting
        "store.write()",
        "store.forget()",
        "store.session(scope)",
        "include_ancestors=True",
        "mode='compliance'",
        "base_version",
        "derived_from",
        # opening a store, its keys and its embedder
        "cenotaph.open(...)",
        "open it with create=True",
        "stop listing it (replicas=)",
        "CENOTAPH_KEYRING (or key_provider=)",
        "key_provider=LocalKeyring(<keyring dir>)",
        "ApiKeyRing.create()",
        "ApiKeyRing.list()",
        "embed()",
        "value_text()",
        "add()",
        "remove()",
    }
)


class Spelling:
    """One surface's words for the remedies: call it on a message, or :meth:`document` on a
    JSON document the store made (an erasure status), to say them that surface's way."""

    def __init__(self, words: Mapping[str, str]) -> None:
        unknown = sorted(set(words) - REMEDIES)
        if unknown:
            raise InvalidValueError(f"no store message names these remedies: {unknown}")
        self.words: Mapping[str, str] = dict(words)
        longest_first = sorted(self.words, key=len, reverse=True)
        self._pattern = re.compile("|".join(rf"(?<![\w.:/'\"-]){re.escape(id_)}" for id_ in longest_first))

    def __call__(self, message: str) -> str:
        """``message`` with every remedy in this surface's words."""
        if not self.words:
            return message
        return self._pattern.sub(lambda match: self.words[match.group(0)], message)

    def document(self, value: T) -> T:
        """``value`` (JSON: dicts, lists, scalars) with every string in it spoken this way; keys
        are names, not messages, and stay as they are."""
        spoken: Any
        if isinstance(value, str):
            spoken = self(value)
        elif isinstance(value, Mapping):
            spoken = {name: self.document(item) for name, item in value.items()}
        elif isinstance(value, list | tuple):
            spoken = [self.document(item) for item in value]
        else:
            spoken = value
        result: T = spoken
        return result
