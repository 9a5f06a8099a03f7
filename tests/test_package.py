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
from types import ModuleType

import pytest

import cenotaph

# The curated public API. A change here is a change of the contract: update it on purpose.
PUBLIC_API = {
    "BackupInfo",
    "CenotaphError",
    "Certificate",
    "CertificateError",
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
    "RotationReport",
    "Scope",
    "ScopeClosureError",
    "SearchHit",
    "StaleWriteError",
    "StorageError",
    "Store",
    "StoreSession",
    "errors",
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
    from cenotaph.erasure.service import Progress
    from cenotaph.index.embedder import Embedder, HashingEmbedder

    assert cenotaph.Embedder is Embedder and cenotaph.HashingEmbedder is HashingEmbedder
    assert cenotaph.Progress is Progress
    assert isinstance(cenotaph.HashingEmbedder(), cenotaph.Embedder)


def _modules() -> list[str]:
    names = ["cenotaph"]
    for info in pkgutil.walk_packages(cenotaph.__path__, prefix="cenotaph."):
        names.append(info.name)
    return sorted(names)


def _examples(module: ModuleType) -> list[doctest.DocTest]:
    return [t for t in doctest.DocTestFinder().find(module, module.__name__) if t.examples]


def test_the_package_docstring_has_a_runnable_example() -> None:
    assert _examples(cenotaph), "the package docstring lost its example"


@pytest.mark.parametrize("name", _modules())
def test_docstring_examples_run(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    module = importlib.import_module(name)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # stores made by examples land here
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CENOTAPH_KEYRING", raising=False)
    monkeypatch.delenv("CENOTAPH_MASTER_KEY", raising=False)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    failures: list[str] = []
    for test in _examples(module):
        result = runner.run(test, out=failures.append)
        assert result.attempted
    assert not failures, "".join(failures)
