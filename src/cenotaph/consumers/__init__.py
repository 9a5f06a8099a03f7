"""Downstream consumers: who took what out of the store, and their word that they deleted it.

A consumer (a summarizer, a dataset builder, a cache) is registered with
``store.register_consumer(name)``; what it reads or exports through its :class:`Consumer` handle is
recorded content-free (record ids and versions, ``feed``). A compliance forget that touches a record
a consumer took gives that consumer an event in the forget's own transaction; the request is not
verified until every such consumer acknowledged (``feed.standing``), and its certificate lists them.
"""

from __future__ import annotations

from .feed import DEFAULT_ACK_DAYS, ConsumerEvent, ConsumerInfo, TakenRecord
from .handle import Consumer

__all__ = ["DEFAULT_ACK_DAYS", "Consumer", "ConsumerEvent", "ConsumerInfo", "TakenRecord"]
