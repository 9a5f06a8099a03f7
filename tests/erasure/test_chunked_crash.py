"""W7 for a large forget and for background purges: SIGKILL at every chunk boundary of a chunked
forget, at chunks of its purge, and at every step of a background purge -- then reopen: nothing
of the target is readable or writable, and the request ends verified with no byte left.

A child (the ``erasure-forget`` scenario) forgets subject a (or a's scope subtree) of a copy of a template
store with ``CENOTAPH_FAULT=<point>@<n>`` set, so it SIGKILLs itself the n-th time it reaches the
point. In ``chunked`` mode the child applies forgets 3 records at a time: a's 10 records take 4
chunks and a last step (sweep, unshared keys, marked shredded), so ``forget.chunk@1..5`` are its
five commit boundaries; a purge there removes one record per transaction.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest
from tests.erasure._erasure_data import (
    DB,
    A,
    B,
    Written,
    assert_gone,
    assert_readable,
    assert_write_refused,
    cells,
    populate,
)
from tests.kit.oracle import residue
from tests.kit.proc import run

import cenotaph

# about SQLite's files and rows (tests/kit/stores.py)
pytestmark = pytest.mark.sqlite_only

FORGET_BOUNDARIES = 5  # 10 records, 3 a chunk: 4 chunks and the last step
BACKGROUND_STEPS = ["purge.chunk", "purge.rows", "purge.wal", "purge.scanned", "purge.done"]


@dataclass
class Template:
    path: Path
    a: Written
    b: Written
    a_cells: list[bytes]


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Template:
    path = tmp_path_factory.mktemp("chunked-crash") / "template"
    with cenotaph.open(path) as store:
        a = populate(store, A, "A", short=9, long=1)
        b = populate(store, B, "B", short=3, long=0)
    return Template(path, a, b, cells(path / DB, a.ids, immutable=True))


def _crash(tmp_path: Path, template: Template, fault: str, mode: str, target: str) -> tuple[Path, list[str]]:
    """A copy of the template, and the lines of a child that SIGKILLed itself at ``fault``."""
    data = tmp_path / "data"
    shutil.copytree(template.path, data)
    # its scan worker dies with it, as in a power cut
    child = run("erasure-forget", fault=fault, data=str(data), mode=mode, target=target)
    assert child.killed, f"not killed at {fault} (exit {child.returncode}): {child.stderr}"
    assert child.lines and child.lines[0] == "opened", child.stderr
    return data, child.lines


def _the_request(store: cenotaph.Store, target: str) -> cenotaph.ErasureRequest:
    (request,) = [r for r in store.erasures() if r.target_kind == target]
    return request


def _ends_verified(store: cenotaph.Store, data: Path, template: Template, target: str) -> None:
    assert_gone(store, template.a)  # before any purge: reopening applied (or finished) the forget
    assert_write_refused(store, template.a)
    assert_readable(store, template.b)
    request = _the_request(store, target)
    # tombstoned: a background worker is still destroying its records' keys (the ledger hides
    # them meanwhile, as checked above)
    assert request.status().state in ("tombstoned", "shredded", "purged", "verified")
    assert request.wait(timeout=120).state == "verified", request.status().gaps
    assert store.confirm_erasure(request.id).layers["scan"].evidence["probes"] > 0
    cenotaph.verify_certificate(store.attest(request.id).to_json(), store.public_key)
    found = residue(data, texts=[template.a.canary], blobs=template.a_cells)
    assert found["text_hits"] == [] and found["window_hits"] == [], found
    assert_readable(store, template.b)


@pytest.mark.parametrize("target", ["subject", "scope"])
@pytest.mark.parametrize("boundary", range(1, FORGET_BOUNDARIES + 1))
def test_a_chunked_forget_killed_at_any_chunk_boundary_is_finished_on_reopen(
    tmp_path: Path, template: Template, boundary: int, target: str
) -> None:
    data, lines = _crash(tmp_path, template, f"forget.chunk@{boundary}", "chunked", target)
    assert not any(line.startswith("returned") for line in lines)
    # the background worker would finish it too; "off" finishes it inside open, so this checks
    # what open alone leaves behind
    with cenotaph.open(data, auto_purge="off") as store:
        assert _the_request(store, target).status().state == "shredded", "open finished the chunks"
        _ends_verified(store, data, template, target)
    with cenotaph.open(data) as again:  # and it stays that way
        assert_gone(again, template.a)
        assert_write_refused(again, template.a)


@pytest.mark.parametrize("point", ["forget.ledgered", "forget.committed"])
def test_a_chunked_forget_killed_around_its_head_is_finished_by_the_background_worker(
    tmp_path: Path, template: Template, point: str
) -> None:
    """``forget.ledgered``: the plan is in the ledger, its head never committed (the reopening
    store replays it, head first, then chunks); ``forget.committed``: the head committed, no
    chunk ran. Either way a default store's worker finishes and purges it."""
    data, lines = _crash(tmp_path, template, point, "chunked", "subject")
    assert not any(line.startswith("returned") for line in lines)
    with cenotaph.open(data) as store:
        _ends_verified(store, data, template, "subject")


@pytest.mark.parametrize("nth", [1, 5, 10])  # 10 records, one a transaction
def test_a_chunked_purge_killed_at_a_chunk_resumes_to_verified(
    tmp_path: Path, template: Template, nth: int
) -> None:
    data, lines = _crash(tmp_path, template, f"purge.chunk@{nth}", "chunked", "subject")
    returned = [line for line in lines if line.startswith("returned ")]
    assert len(returned) == 1 and returned[0].endswith(" shredded"), lines
    assert "purged" not in lines
    with cenotaph.open(data, auto_purge="off") as store:
        _ends_verified(store, data, template, "subject")


@pytest.mark.parametrize("point", BACKGROUND_STEPS)
def test_a_background_purge_killed_at_any_step_ends_verified_after_reopen(
    tmp_path: Path, template: Template, point: str
) -> None:
    data, lines = _crash(tmp_path, template, point, "background", "subject")
    assert "verified" not in lines
    returned = [line for line in lines if line.startswith("returned ")]
    if returned:  # the worker may reach the step before the forget's caller prints
        assert returned[0].endswith(" shredded"), returned
    with cenotaph.open(data) as store:  # its own worker resumes the purge
        _ends_verified(store, data, template, "subject")
