"""``cenotaph.backends`` maps a location to its backend: a data directory to SQLite, a
``postgresql://`` URL to the PostgreSQL backend, imported only then and refused clearly when it
or its driver is missing. The store settles its key provider between checking the location and
opening the backend.
"""

from __future__ import annotations

import importlib
import stat
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

import cenotaph
import cenotaph.backends
from cenotaph.backends import is_postgres_url, locate, open_backend
from cenotaph.errors import InvalidValueError, KeyProviderError

PG = "cenotaph.backends.postgres"
URLS = ["postgresql://cenotaph@127.0.0.1:5432/test", "postgres://127.0.0.1/test"]
NOT_AVAILABLE = "the PostgreSQL backend is not available in this version; use a data directory"
INSTALL = "pip install 'cenotaph[postgres]'"

STAND_IN = '''
"""A stand-in PostgreSQL backend package: records what it is asked to open."""
OPENED = []


def open_postgres(dsn, **options):
    {body}
    OPENED.append((dsn, options))
    return "a postgres backend"
'''


@pytest.fixture
def fresh_postgres(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Each test imports ``cenotaph.backends.postgres`` anew; what it imported is forgotten after."""
    before = {name: module for name, module in sys.modules.items() if name.startswith(PG)}
    for name in before:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.delattr(cenotaph.backends, "postgres", raising=False)  # an import sets it again
    yield
    for name in [n for n in sys.modules if n.startswith(PG) and n not in before]:
        del sys.modules[name]
    if PG not in before and hasattr(cenotaph.backends, "postgres"):
        delattr(cenotaph.backends, "postgres")


def _stand_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, body: str = "pass") -> None:
    """Put a stand-in ``postgres`` package first on ``cenotaph.backends``' path."""
    package = tmp_path / "stand-in" / "postgres"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(textwrap.dedent(STAND_IN.format(body=body)))
    path = [str(package.parent), *cenotaph.backends.__path__]
    monkeypatch.setattr(cenotaph.backends, "__path__", path)
    importlib.invalidate_caches()


def test_a_directory_is_an_sqlite_store_created_private(tmp_path: Path) -> None:
    data = tmp_path / "a" / "data"
    backend = open_backend(data)
    try:
        assert type(backend).__module__ == "cenotaph.backends.sqlite.backend"
        assert backend.location == data
        assert (data / "cenotaph.db").is_file()
        assert stat.S_IMODE(data.stat().st_mode) == 0o700
    finally:
        backend.close()


def test_a_path_object_is_never_read_as_a_url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert is_postgres_url(URLS[0]) and not is_postgres_url(Path(URLS[0]))
    place = locate(Path(URLS[0]))
    assert place.url is None and place.directory == Path(URLS[0])
    assert (tmp_path / "postgresql:").is_dir()  # a directory of that name, as any other path


def test_locating_a_directory_opens_nothing_in_it(tmp_path: Path) -> None:
    place = locate(tmp_path / "data")
    assert place.directory == tmp_path / "data" and place.url is None
    assert list((tmp_path / "data").iterdir()) == []


def test_a_file_is_not_a_data_directory(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("kept")
    with pytest.raises(InvalidValueError, match="choose"):
        open_backend(tmp_path / "file")
    assert (tmp_path / "file").read_text() == "kept"


def test_a_data_directory_takes_no_backend_options(tmp_path: Path) -> None:
    with pytest.raises(InvalidValueError, match="replicas applies to a PostgreSQL store only"):
        open_backend(tmp_path / "data", replicas=["postgresql://replica/test"])
    assert not (tmp_path / "data" / "cenotaph.db").exists()


@pytest.mark.usefixtures("fresh_postgres")
@pytest.mark.parametrize("url", URLS)
def test_a_postgresql_url_without_the_backend_is_refused_as_before(
    url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setitem(sys.modules, PG, None)  # this installation has no PostgreSQL backend
    with pytest.raises(InvalidValueError) as info:
        cenotaph.open(url)
    assert str(info.value) == NOT_AVAILABLE
    assert list(tmp_path.iterdir()) == []  # no directory named after the URL


@pytest.mark.usefixtures("fresh_postgres")
@pytest.mark.parametrize("driver", ["psycopg", "psycopg_pool"])
def test_the_backend_without_its_driver_says_how_to_install_it(
    driver: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, driver, None)  # not installed, as far as imports can tell
    _stand_in(tmp_path, monkeypatch, body=f"import {driver}  # as a backend importing it late")
    with pytest.raises(InvalidValueError, match="pip install 'cenotaph\\[postgres\\]'") as info:
        open_backend(URLS[0])
    assert INSTALL in str(info.value) and "127.0.0.1" not in str(info.value)


@pytest.mark.usefixtures("fresh_postgres")
def test_the_real_backend_package_without_its_driver_says_how_to_install_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whatever ``cenotaph.backends.postgres`` is in this checkout (absent, or the real one, which
    imports psycopg): never a bare ImportError."""
    monkeypatch.setitem(sys.modules, "psycopg", None)
    monkeypatch.setitem(sys.modules, "psycopg_pool", None)
    with pytest.raises(InvalidValueError) as info:
        cenotaph.open(URLS[0], key_provider=cenotaph.LocalKeyring(tmp_path / "keyring"))
    message = str(info.value)
    assert message == NOT_AVAILABLE or INSTALL in message, message


@pytest.mark.usefixtures("fresh_postgres")
def test_a_postgresql_url_goes_to_open_postgres_with_its_options(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _stand_in(tmp_path, monkeypatch)
    replicas = ["postgresql://127.0.0.1:5433/test"]
    backend: object = open_backend(URLS[1], replicas=replicas)
    opened = sys.modules[PG].OPENED
    assert backend == "a postgres backend"
    assert opened == [(URLS[1], {"replicas": replicas})]


@pytest.mark.usefixtures("fresh_postgres")
def test_a_postgresql_store_needs_a_key_provider(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _stand_in(tmp_path, monkeypatch)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InvalidValueError, match="pass key_provider=LocalKeyring"):
        cenotaph.open(URLS[0])
    opened = sys.modules[PG].OPENED
    assert opened == []  # refused before anything connects
    assert [p.name for p in tmp_path.iterdir()] == ["stand-in"]


def test_a_refused_default_keyring_leaves_no_database_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The key provider is settled before the backend creates the database: a new directory whose
    keyring is refused stays new, and opens once the keyring is fixed (a database left behind
    would make it look like a store whose keyring was lost)."""
    data = tmp_path / "data"
    monkeypatch.setenv("CENOTAPH_MASTER_KEY", "not hex")
    with pytest.raises(KeyProviderError):
        cenotaph.open(data)
    assert list(data.iterdir()) == []
    monkeypatch.delenv("CENOTAPH_MASTER_KEY")
    with cenotaph.open(data) as store:
        assert store.path == data
        assert store.write("tenant:acme/user:alice", "k", "v").value == "v"
    assert (data / "keyring" / "keyring.json").is_file() and (data / "cenotaph.db").is_file()


def test_opening_a_directory_imports_no_postgres_module(tmp_path: Path) -> None:
    script = (
        "import sys, cenotaph\n"
        f"cenotaph.open({str(tmp_path / 'data')!r}).close()\n"
        "print(sorted(n for n in sys.modules if n.startswith(('cenotaph.backends.postgres', 'psycopg'))))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
