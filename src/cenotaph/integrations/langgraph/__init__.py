"""LangGraph integration: :class:`CenotaphStore`, a ``BaseStore`` whose deletes are erasures, and
:class:`AsyncCenotaphStore`, its twin for async applications (batched as LangGraph's async stores).

Needs ``pip install 'cenotaph[integrations]'`` (``langgraph`` 1.x). See ``docs/integrations.md``
for how namespaces map to scopes and where the adapter differs from LangGraph's own stores.
"""

from __future__ import annotations

from ._aio import AsyncCenotaphStore
from ._namespaces import NamespaceMap, UserPattern
from ._store import DEFAULT_SCOPE, BaseCenotaphStore, CenotaphStore, ForgottenItemError, StaleItemError

__all__ = [
    "DEFAULT_SCOPE",
    "AsyncCenotaphStore",
    "BaseCenotaphStore",
    "CenotaphStore",
    "ForgottenItemError",
    "NamespaceMap",
    "StaleItemError",
    "UserPattern",
]
