"""Which way the erasure side, the command line and the store's memory may import.

The store holds the erasure service, and both hold one ``StoreMemory``: nothing under
``cenotaph.erasure`` may import the store (it would be a way to call back into it), and the
memory may import nothing of ``cenotaph.erasure`` (it sits below the erasure side, which holds
it). Neither the erasure side nor the command line imports a backend's own modules: they ask the
backend's physical part (``backends.physical``) or the backends package, so another backend
plugs in without them knowing SQLite. Read from the source files' own import statements.
"""

from __future__ import annotations

import ast
from pathlib import Path

import cenotaph

PACKAGE = Path(cenotaph.__file__).parent


def _imports(path: Path) -> set[str]:
    """The absolute names of the ``cenotaph`` modules ``path`` imports (relative imports resolved)."""
    module = ".".join(("cenotaph", *path.relative_to(PACKAGE).with_suffix("").parts))
    package = module.rsplit(".", 1)[0] if path.name != "__init__.py" else module.removesuffix(".__init__")
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                head = parts[: len(parts) - node.level + 1]
                base = ".".join([*head, base] if base else head)
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return {name for name in found if name == "cenotaph" or name.startswith("cenotaph.")}


def _sqlite_imports(path: Path) -> list[str]:
    return sorted(n for n in _imports(path) if n == SQLITE or n.startswith(SQLITE + "."))


SQLITE = "cenotaph.backends.sqlite"


def test_the_imports_are_read_as_written() -> None:
    """The reader itself: the store's own imports name the erasure service and the memory, and
    the backends package's opener imports the SQLite backend (so a module importing it would be
    caught)."""
    found = _imports(PACKAGE / "store.py")
    assert "cenotaph.erasure.service" in found and "cenotaph.memory" in found
    assert _sqlite_imports(PACKAGE / "backends" / "__init__.py")


def test_the_backends_share_only_through_the_contract_and_the_sql_layer() -> None:
    """Neither backend's package imports the other's, nor a private name of any module: what
    both use lives in ``backends.base``, ``backends.physical`` or ``backends.sql``."""
    for name, other in (("postgres", "sqlite"), ("sqlite", "postgres")):
        for path in sorted((PACKAGE / "backends" / name).glob("*.py")):
            found = _imports(path)
            assert not [n for n in found if n.startswith(f"cenotaph.backends.{other}")], path.name
            assert not [n for n in found if n.rsplit(".", 1)[-1].startswith("_")], path.name


def test_nothing_in_erasure_imports_the_store() -> None:
    offenders = {
        path.name: sorted(n for n in _imports(path) if n in ("cenotaph.store", "cenotaph.session"))
        for path in sorted((PACKAGE / "erasure").glob("*.py"))
    }
    assert not {name: found for name, found in offenders.items() if found}


def test_the_memory_imports_nothing_of_erasure() -> None:
    found = sorted(n for n in _imports(PACKAGE / "memory.py") if n.startswith("cenotaph.erasure"))
    assert not found


def test_erasure_and_the_cli_import_no_backend_module() -> None:
    """What ``erasure/`` and ``cli/`` need of the engine (WAL truncation, VACUUM, its files, the
    doctor's checks) they get through ``backend.physical`` or ``cenotaph.backends``."""
    offenders = {
        f"{path.parent.name}/{path.name}": _sqlite_imports(path)
        for package in ("erasure", "cli")
        for path in sorted((PACKAGE / package).rglob("*.py"))
    }
    assert len(offenders) > 40  # both packages were read
    assert not {name: found for name, found in offenders.items() if found}


def test_the_backend_contract_is_engine_free() -> None:
    """The protocols a backend implements import no backend of their own."""
    for name in ("base.py", "physical.py"):
        assert not _sqlite_imports(PACKAGE / "backends" / name), name


def _backend_packages() -> set[str]:
    """Every backend's package under ``cenotaph.backends`` (PostgreSQL's even before it exists)."""
    found = {p.name for p in (PACKAGE / "backends").iterdir() if (p / "__init__.py").is_file()}
    return found | {"postgres"}


def test_the_store_imports_no_backend() -> None:
    """The store opens its backend through ``cenotaph.backends`` (``locate``, ``open_backend``)
    and speaks to it through ``backends.base``'s protocol: it imports no backend's package."""
    found = _imports(PACKAGE / "store.py")
    assert {"cenotaph.backends.locate", "cenotaph.backends.base"} <= found  # the reader sees them
    assert "sqlite" in _backend_packages()
    named = {n.split(".")[2] for n in found if n.startswith("cenotaph.backends.")}
    assert not named & _backend_packages(), sorted(named & _backend_packages())
