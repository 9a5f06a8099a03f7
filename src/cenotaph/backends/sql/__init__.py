"""The SQL both backends share: the store's statements written once (:mod:`.handlers`), its
tables' columns and rows (:mod:`.columns`), and each difference between the engines named
where it is (:mod:`.dialect`: placeholders, lists of values, row order, parameter types).

A backend's transaction class mixes :class:`SQLHandlers` in and supplies what only it can do:
running a statement on its connection, and the statements whose engines differ in more than
the dialect names (bulk inserts, a slot's newest row, the purge's pair deletes, rewrapping).
"""

from .columns import epochs_in_use
from .dialect import POSTGRES, SQLITE, Dialect
from .handlers import SQLHandlers

__all__ = ["POSTGRES", "SQLITE", "Dialect", "SQLHandlers", "epochs_in_use"]
