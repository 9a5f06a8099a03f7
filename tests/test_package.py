"""The package's public face: what ``import cenotaph`` exports, and the examples in its docstrings.

Every docstring example in ``src/cenotaph`` runs here (``make test`` runs this file), so an example
that stops matching the code fails the suite instead of misleading a reader.
"""

from __future__ import annotations

import ast
import doctest
import importlib
import inspect
import pkgutil
import tempfile
from pathlib import Path

import pytest

import cenotaph


def _bound_by_init() -> set[str]:
    """The public names ``cenotaph/__init__.py`` binds itself: what it imports from the package
    (under ``TYPE_CHECKING`` too: served lazily), and what it defines."""
    tree = ast.parse(Path(cenotaph.__file__).read_text())
    nodes = [n for top in tree.body for n in (top.body if isinstance(top, ast.If) else [top])]
    names: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.ImportFrom) and node.level > 0:  # the package's own, not typing's
            names.update(alias.asname or alias.name for alias in node.names)
        elif isinstance(node, ast.FunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return {name for name in names if not name.startswith("_")}


def _documented(name: str, value: object) -> bool:
    """A class, function or module with a docstring of its own (not a dataclass's generated
    signature); a type alias, which carries none, is documented by the store method taking it."""
    if inspect.isclass(value) or inspect.isroutine(value) or inspect.ismodule(value):
        doc = inspect.getdoc(value) or ""
        return bool(doc) and not doc.startswith(f"{name}(")
    methods = [m for _, m in inspect.getmembers(cenotaph.Store, inspect.isfunction)]
    return any(name in str(inspect.signature(m)) for m in methods)


def test_all_lists_every_public_name_the_package_binds() -> None:
    """As httpx pins its API: ``__all__`` is sorted, has no name twice, and is exactly the public
    names ``__init__`` binds -- a name imported there but not listed (or listed but not imported)
    fails, so a change of the public API is always made on purpose."""
    assert cenotaph.__all__ == sorted(cenotaph.__all__), "keep __all__ sorted"
    assert len(cenotaph.__all__) == len(set(cenotaph.__all__)), "a name is listed twice"
    assert set(cenotaph.__all__) == _bound_by_init()


@pytest.mark.parametrize("name", cenotaph.__all__)
def test_every_exported_name_exists_and_is_documented(name: str) -> None:
    value = getattr(cenotaph, name)  # Client too: imported on first use
    assert _documented(name, value), f"cenotaph.{name} has no docstring of its own"


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
