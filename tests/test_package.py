"""The package's public face: what ``import cenotaph`` exports, and the examples in its docstrings.

Every docstring example in ``src/cenotaph`` runs here (``make test`` runs this file), so an example
that stops matching the code fails the suite instead of misleading a reader.
"""

from __future__ import annotations

import doctest
import importlib
import pkgutil
import tempfile
from pathlib import Path

import pytest

import cenotaph

# The curated public API. A change here is a change of the contract: update it on purpose.
PUBLIC_API = {
    "AccessDeniedError",
    "BackupInfo",
    "CenotaphError",
    "Certificate",
    "CertificateError",
    "Client",
    "DerivedFromForgottenError",
    "Embedder",
    "ErasureNotProvableError",
    "ErasureRequest",
    "ErasureStatus",
    "ForgottenError",
    "HashingEmbedder",
    "InvalidScopeError",
    "InvalidValueError",
    "KeyProvider",
    "KeyProviderError",
    "LayerStatus",
    "LocalKeyring",
    "NotFoundError",
    "Progress",
    "PurgeReport",
    "Record",
    "Retention",
    "RotationReport",
    "Scope",
    "ScopeClosureError",
    "SearchHit",
    "StaleWriteError",
    "StorageError",
    "Store",
    "StoreSession",
    "errors",
    "limits",
    "operations",
    "wire",
    "open",
    "restore",
    "verify_certificate",
}


def test_all_is_pinned() -> None:
    assert set(cenotaph.__all__) == PUBLIC_API
    assert len(cenotaph.__all__) == len(set(cenotaph.__all__)), "a name is listed twice"
    for name in cenotaph.__all__:
        assert hasattr(cenotaph, name), f"cenotaph.__all__ names {name}, which cenotaph lacks"


def test_the_plug_in_types_are_the_ones_the_store_uses() -> None:
    from cenotaph.erasure.entrance import Progress
    from cenotaph.index.embedder import Embedder, HashingEmbedder

    assert cenotaph.Embedder is Embedder and cenotaph.HashingEmbedder is HashingEmbedder
    assert cenotaph.Progress is Progress
    assert isinstance(cenotaph.HashingEmbedder(), cenotaph.Embedder)


def _docstring_examples() -> dict[str, doctest.DocTest]:
    """Every docstring with an example in the package, by its dotted name."""
    names = ["cenotaph", *(i.name for i in pkgutil.walk_packages(cenotaph.__path__, prefix="cenotaph."))]
    found: dict[str, doctest.DocTest] = {}
    for name in names:
        module = importlib.import_module(name)
        found.update({t.name: t for t in doctest.DocTestFinder().find(module, name) if t.examples})
    return found


EXAMPLES = _docstring_examples()


def test_the_package_and_the_store_show_runnable_examples() -> None:
    assert {"cenotaph", "cenotaph.store.Store", "cenotaph.scope"} <= set(EXAMPLES), sorted(EXAMPLES)


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_docstring_examples_run(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # stores made by examples land here
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CENOTAPH_KEYRING", raising=False)
    monkeypatch.delenv("CENOTAPH_MASTER_KEY", raising=False)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    failures: list[str] = []
    test = EXAMPLES[name]
    test.globs = dict(test.globs)  # each run starts from the module's own names
    result = runner.run(test, out=failures.append)
    assert result.attempted == len(test.examples)
    assert not failures, "".join(failures)
