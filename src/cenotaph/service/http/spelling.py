"""The store speaks API; the HTTP API and the console say the same steps their own way.

A caller over HTTP cannot run ``store.purge()`` or ``store.reauthorize(...)``: what it can do next
is a request (``POST /v1/purge``), or, in the console, one of its actions ("Purge now"). Every
store message the server sends (an error body's ``message`` and ``gaps``, an erasure status's
gaps, next step and evidence) passes through :data:`speak_http`, and every one the console shows
through :data:`speak_console`: :class:`cenotaph.remedies.Spelling` objects over the tables below,
from each remedy the store names (:data:`cenotaph.remedies.REMEDIES`) to these words. Signed
certificates and the caller's own data are never rewritten.

Every remedy has HTTP words here or is in :data:`NOT_OVER_HTTP` (what the server never does with a
caller's input, so no answer names it); tests pin both tables against the remedies.
"""

from __future__ import annotations

from ...remedies import Spelling

__all__ = ["API_TO_CONSOLE", "API_TO_HTTP", "NOT_OVER_HTTP", "speak_console", "speak_http"]

API_TO_HTTP: dict[str, str] = {
    "store.reauthorize(scope, subject=...)": "`POST /v1/reauthorizations` with `subject` (an operator key)",
    "store.reauthorize(...)": "`POST /v1/reauthorizations` (sent back as the write's `reauthorization`)",
    "store.reauthorize()": "`POST /v1/reauthorizations`",
    "store.purge()": "`POST /v1/purge`",
    "purge()": "`POST /v1/purge`",
    "rotate_keys()": "`POST /v1/keys/rotate`",
    "release_backup()": "`POST /v1/backups/{id}/release`",
    "store.check_integrity()": "`cenotaph doctor` on the server",
    "store.attest()": "`GET /v1/erasures/{id}/certificate`",
    "store.erasure(request_id)": "`GET /v1/erasures/{id}`",
    "store.erasures()": "`GET /v1/erasures`",
    "store.backups()": "`GET /v1/backups`",
    "store.backup()": "`POST /v1/backups`",
    "store.consumers()": "`GET /v1/consumers`",
    "store.register_consumer()": "`POST /v1/consumers`",
    "cenotaph.restore()": "`cenotaph restore` on the server",
    "store.write()": "`POST /v1/memories`",
    "store.forget()": "`POST /v1/forget`",
    "store.session(scope)": "`POST /v1/sessions`",
    "include_ancestors=True": '`"include_ancestors": true`',
    "mode='compliance'": '`"mode": "compliance"`',
    "base_version": "base_version",  # the same name in a request body
    "derived_from": "derived_from",
    "cenotaph.open(...)": "a restart of the server",
    "ApiKeyRing.create()": "`cenotaph api-keys create` on the server",
    "ApiKeyRing.list()": "`cenotaph api-keys list` on the server",
    "stop listing it (replicas=)": "stop listing it in the server's CENOTAPH_REPLICAS",
}

# Raised only while a store is opened or by the server's own embedder and index: no request names them.
NOT_OVER_HTTP = frozenset(
    {
        "CENOTAPH_KEYRING (or key_provider=)",
        "key_provider=LocalKeyring(<keyring dir>)",
        "open it with create=True",
        "store.cenotaph.reauthorize(...)",  # the LangGraph integration's own store
        "embed()",
        "value_text()",
        "add()",
        "remove()",
    }
)

# The console's own actions where it has one; the API's routes elsewhere.
API_TO_CONSOLE: dict[str, str] = {
    **API_TO_HTTP,
    "store.purge()": "“Purge now” (on the request's page)",
    "purge()": "“Purge now” (on the request's page)",
    "store.attest()": "“Download certificate” (on the request's page, once verified)",
    "store.erasure(request_id)": "the request's page",
    "store.erasures()": "the “Erasure requests” page",
    "store.backups()": "the “Backups & key epochs” page",
    "store.consumers()": "the “Consumers” page",
}

speak_http = Spelling(API_TO_HTTP)
speak_console = Spelling(API_TO_CONSOLE)
