"""Which way the ledger, the erasure side, the command line and the store's caches may import.

The store holds the erasure side's one entrance (``erasure.entrance.Erasure``), and both hold one
``StoreCaches``: nothing under ``cenotaph.erasure`` may import the store (it would be a way to
call back into it), and the caches may import nothing of ``cenotaph.erasure`` (they sit below the
erasure side, which holds them). The ledger (``cenotaph.ledger``) sits below both the write path
and erasure, which import it: it imports neither, nor the store. Neither the erasure side nor the
command line imports a backend's own modules: they ask the backend's physical part
(``backends.physical``) or the backends package, so another backend plugs in without them knowing
SQLite. Read from the source files' own import statements.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

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
    """The reader itself: the store's own imports name the erasure entrance and the caches, and
    the backends package's opener imports the SQLite backend (so a module importing it would be
    caught)."""
    found = _imports(PACKAGE / "store.py")
    assert "cenotaph.erasure.entrance" in found and "cenotaph.caches" in found
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
        str(path.relative_to(PACKAGE)): sorted(
            n for n in _imports(path) if n in ("cenotaph.store", "cenotaph.session")
        )
        for path in sorted((PACKAGE / "erasure").rglob("*.py"))
    }
    assert len(offenders) > 20  # every subpackage was read
    assert not {name: found for name, found in offenders.items() if found}


def test_the_store_enters_erasure_once() -> None:
    """The store reaches erasure through its entrance; besides it, only the probe sealer the
    ledger is built with and the restore of a data directory's files (module-level ``restore``)."""
    found = {n for n in _imports(PACKAGE / "store.py") if n.startswith("cenotaph.erasure.")}
    modules = {n for n in found if (PACKAGE / Path(*n.split(".")[1:])).with_suffix(".py").is_file()}
    assert "cenotaph.erasure.entrance" in modules
    allowed = {
        "cenotaph.erasure.entrance",
        "cenotaph.erasure.planning.sampling",
        "cenotaph.erasure.lifecycle.restoring",
    }
    assert modules <= allowed, sorted(modules - allowed)


def test_the_caches_import_nothing_of_erasure() -> None:
    found = sorted(n for n in _imports(PACKAGE / "caches.py") if n.startswith("cenotaph.erasure"))
    assert not found


def test_the_ledger_imports_neither_writes_nor_erasure_nor_the_store() -> None:
    above = ("cenotaph.erasure", "cenotaph.writes", "cenotaph.store", "cenotaph.session", "cenotaph.caches")
    offenders = {
        str(path.relative_to(PACKAGE)): sorted(n for n in _imports(path) if n.startswith(above))
        for path in sorted((PACKAGE / "ledger").rglob("*.py"))
    }
    assert len(offenders) >= 5  # the package was read
    assert not {name: found for name, found in offenders.items() if found}


SURFACE_PACKAGES = ("cli", "service", "integrations")
ABOVE_THE_CORE = {"__init__.py", "store.py", "session.py", "client.py", "operations.py"}


def test_nothing_below_the_store_imports_it() -> None:
    """The store and its sessions sit on top of the core (ledger, writes, erasure, caches, crypto,
    index, backends); only the package's entrance and the surfaces import them."""
    below = [
        path
        for path in sorted(PACKAGE.rglob("*.py"))
        if path.relative_to(PACKAGE).parts[0] not in SURFACE_PACKAGES
        and str(path.relative_to(PACKAGE)) not in ABOVE_THE_CORE
    ]
    offenders = {
        str(path.relative_to(PACKAGE)): sorted(
            n for n in _imports(path) if n in ("cenotaph.store", "cenotaph.session")
        )
        for path in below
    }
    assert len(offenders) > 70  # the core was read
    assert not {name: found for name, found in offenders.items() if found}


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


# -- the surfaces: HTTP, MCP, the adapters, the command line and the remote client ---------------
PUBLIC_MODULES = frozenset(
    {
        "cenotaph",
        "cenotaph.errors",
        "cenotaph.model",
        "cenotaph.limits",
        "cenotaph.remedies",
        "cenotaph.wire",
        "cenotaph.operations",
    }
)
"""What a surface may import of cenotaph besides its own package: the public API."""

SURFACES = {
    "service": ("cenotaph.service",),
    "integrations": ("cenotaph.integrations",),
    # the command line starts the HTTP and MCP servers and manages their API keys
    "cli": ("cenotaph.cli", "cenotaph.service"),
}


def _modules(path: Path) -> set[str]:
    """The ``cenotaph`` modules ``path`` imports: each ``from M import x`` counts as M, and as
    ``M.x`` too when that is a module (``from cenotaph import store`` imports ``cenotaph.store``)."""
    modules = _module_names()
    found = set()
    for name in _imports(path):
        parent = name.rpartition(".")[0]
        found.add(parent if name not in modules and parent in modules else name)
    return found


def _module_names() -> set[str]:
    """Every module and package under ``src/cenotaph``, by its dotted name."""
    names = {"cenotaph"}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        names.add(".".join(("cenotaph", *(parts[:-1] if parts[-1] == "__init__" else parts))))
    return names


def _outside(path: Path, own: tuple[str, ...]) -> list[str]:
    return sorted(
        name
        for name in _modules(path)
        if name not in PUBLIC_MODULES and not any(name == p or name.startswith(p + ".") for p in own)
    )


def test_the_surface_reader_sees_internal_imports() -> None:
    """The reader itself: a module named through ``from cenotaph import x`` or a relative import
    is counted as that module, a name imported from a module as the module."""
    store = _modules(PACKAGE / "store.py")
    assert "cenotaph.erasure.entrance" in store and "cenotaph.caches" in store
    assert "cenotaph.store.Store" not in _modules(PACKAGE / "__init__.py")
    assert "cenotaph.store" in _modules(PACKAGE / "__init__.py")
    assert _outside(PACKAGE / "__init__.py", ()) != []  # the package itself imports internals
    assert _module_names() >= PUBLIC_MODULES


@pytest.mark.parametrize("surface", sorted(SURFACES))
def test_surfaces_import_only_the_public_api(surface: str) -> None:
    """Every file of a surface imports of cenotaph only the public API and its own package: a
    surface that needs more of the core gets a public, documented call for it, so no surface
    re-implements a core rule behind the API's back."""
    files = sorted((PACKAGE / surface).rglob("*.py"))
    assert len(files) > 5, surface
    offenders = {str(path.relative_to(PACKAGE)): _outside(path, SURFACES[surface]) for path in files}
    assert not {name: found for name, found in offenders.items() if found}


def test_the_client_imports_nothing_of_the_server() -> None:
    """``cenotaph.Client`` knows the wire (:mod:`cenotaph.wire`), not the server's modules."""
    found = _modules(PACKAGE / "client.py")
    assert "cenotaph.wire" in found
    assert not [n for n in found if n == "cenotaph.service" or n.startswith("cenotaph.service.")]
    assert not _outside(PACKAGE / "client.py", ())


def test_the_public_modules_say_what_they_export() -> None:
    """Each public module a surface may import lists its names, and has each."""
    for name in sorted(PUBLIC_MODULES - {"cenotaph"}):
        module = importlib.import_module(name)
        exported = getattr(module, "__all__", None)
        assert exported, f"{name} has no __all__"
        assert all(hasattr(module, n) for n in exported), name
        assert module.__doc__, name
