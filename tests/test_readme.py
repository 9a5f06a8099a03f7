"""The README's Python snippets run as written, each in a fresh directory and interpreter.

The remote client's snippet needs a running server and its key: tests/http/test_serve.py runs it
against a real ``cenotaph serve``. The PostgreSQL snippet names hosts of a deployment
(``db.internal``): it runs here with those addresses replaced by the test server's, and its
keyring path by a temporary one -- every other character as written.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from tests.kit.stores import skip_or_fail_postgres

README = Path(__file__).resolve().parents[1] / "README.md"
SNIPPETS = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.S)
SERVER = "cenotaph.Client("
POSTGRES = "postgresql://app@db.internal"


def _run(code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("CENOTAPH_KEYRING", "CENOTAPH_MASTER_KEY")}
    return subprocess.run(
        [sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )


def test_the_snippets_are_found() -> None:
    assert len(SNIPPETS) >= 5 and any(SERVER in s for s in SNIPPETS) and any(POSTGRES in s for s in SNIPPETS)


@pytest.mark.parametrize(
    "snippet",
    [s for s in SNIPPETS if SERVER not in s and POSTGRES not in s],
    ids=lambda s: s.splitlines()[0][:40],
)
def test_a_snippet_runs_as_written(snippet: str, tmp_path: Path) -> None:
    done = _run(snippet, tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Traceback" not in done.stderr


def test_the_postgres_snippet_runs_against_a_real_server(tmp_path: Path) -> None:
    skip_or_fail_postgres()
    dsn = os.environ["CENOTAPH_TEST_PG_DSN"]
    (snippet,) = [s for s in SNIPPETS if POSTGRES in s]
    schema = f"readme_{os.getpid()}"
    base = dsn.split("?")[0]
    code = (
        snippet.replace("postgresql://app@db.internal/prod?schema=memories", f"{base}?schema={schema}")
        .replace('replicas=["postgresql://app@replica-1.internal/prod"],', "")
        .replace("/etc/cenotaph/keyring", str(tmp_path / "keyring"))
    )
    assert "db.internal" not in code and "replica-1" not in code
    code += "\nstore.write('tenant:acme/user:alice', 'k', 'v')\nstore.close()\n"
    try:
        done = _run(code, tmp_path)
        assert done.returncode == 0, done.stderr[-3000:]
    finally:
        import psycopg

        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
