"""The store speaks API; the command line says the same steps its own way.

Messages raised by the store name Python calls and arguments (``store.purge()``,
``include_ancestors=True``): that is what an API caller can act on, and each such spelling is a
remedy's id in :mod:`cenotaph.remedies`. The CLI passes every message it shows a person (an error
on stderr, a warning, a table cell) through :func:`speak_cli`, a :class:`~cenotaph.remedies.Spelling`
of :data:`API_TO_CLI`, which replaces each API spelling with the command-line one (``cenotaph
purge``, ``--include-ancestors``). JSON documents on stdout are the store's data and stay as it
made them (a certificate is signed, and scripts compare documents with what the API returns).

One table, both directions pinned by tests: no store message spells a CLI command, every API
spelling a store message uses has a CLI form here (or is in :data:`API_ONLY`), and no entry is
dead.
"""

from __future__ import annotations

from ..remedies import Spelling

__all__ = ["API_ONLY", "API_TO_CLI", "speak_cli"]

API_TO_CLI: dict[str, str] = {
    "store.reauthorize(scope, subject=...)": "`cenotaph reauthorize SCOPE --subject SUBJECT`",
    "store.reauthorize(...)": ("`cenotaph reauthorize` (then `cenotaph write ... --reauthorization TOKEN`)"),
    "store.reauthorize()": "`cenotaph reauthorize`",
    "store.purge()": "`cenotaph purge`",
    "store.check_integrity()": "`cenotaph doctor`",
    "store.erasure(request_id)": "`cenotaph status ID`",
    "purge()": "`cenotaph purge`",
    "rotate_keys()": "`cenotaph rotate-keys`",
    "release_backup()": "`cenotaph release-backup ID`",
    "store.erasures()": "`cenotaph status`",
    "store.backups()": "`cenotaph status`",
    "store.backup()": "`cenotaph backup`",
    "store.consumers()": "`cenotaph consumers list`",
    "store.register_consumer()": "`cenotaph consumers add`",
    "store.forget()": "`cenotaph forget`",
    "store.write()": "`cenotaph write`",
    "store.attest()": "`cenotaph attest`",
    "cenotaph.restore()": "`cenotaph restore`",
    "ApiKeyRing.create()": "`cenotaph api-keys create`",
    "ApiKeyRing.list()": "`cenotaph api-keys list`",
    "include_ancestors=True": "--include-ancestors",
    "mode='compliance'": "--mode compliance",
    "base_version": "--base-version",
    "derived_from": "--derived-from",
    "CENOTAPH_KEYRING (or key_provider=)": "CENOTAPH_KEYRING",
    "open it with create=True": "run `cenotaph init` with that --data",
    "stop listing it (replicas=)": "stop listing it (CENOTAPH_REPLICAS)",
}

# API spellings in messages that only an API caller can meet (the CLI never makes those calls).
API_ONLY = frozenset(
    {
        "embed()",
        "value_text()",
        "add()",
        "remove()",
        "store.session(scope)",
        "cenotaph.open(...)",
        "key_provider=LocalKeyring(<keyring dir>)",
        "store.cenotaph.reauthorize(...)",  # the LangGraph integration's own store
    }
)

speak_cli = Spelling(API_TO_CLI)
"""``speak_cli(message)``: ``message`` with every API spelling replaced by its command-line form."""
