"""W7 and S3 (resumable purge) at every named crash point of cenotaph.faults.FAULT_POINTS.

A template data directory holds records of two subjects (written by this process, then closed). For
each point a copy of it is handed to a child (the ``erasure-forget`` scenario) that compliance-forgets subject a
with ``CENOTAPH_FAULT=<point>`` set, and so SIGKILLs itself at that step. This process then reopens
the directory and purges:

- at or after ``forget.ledgered`` (the forget reached the key provider's ledger): a's data is gone
  even before the purge (the ledger is replayed on open), the request exists and ends ``verified``,
  no byte of a is left in any file, and writes to a stay refused;
- before it (``forget.planned``, ``forget.applied``): all or nothing -- either everything of a is
  still readable and nothing blocks writes to it, or everything is forgotten; never a mix;
- b is always fully readable.

Also the purge steps when purge() is run explicitly after a forget that returned (auto_purge="off"):
reopening and purging resumes to ``verified`` and nothing comes back.
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
from cenotaph.faults import FAULT_POINTS

# about SQLite's files and rows (tests/kit/stores.py)
pytestmark = pytest.mark.sqlite_only

LEDGERED = FAULT_POINTS.index("forget.ledgered")
REACHED_LEDGER = frozenset(FAULT_POINTS[LEDGERED:])
PURGE_POINTS = [p for p in FAULT_POINTS if p.startswith("purge.")]
# restore's points are tested elsewhere, and so are a large forget's chunk boundaries (this
# forget is small: it is applied whole, in one transaction)
FORGET_POINTS = [p for p in FAULT_POINTS if p.startswith(("forget.", "purge.")) and p != "forget.chunk"]


@dataclass
class Template:
    path: Path
    a: Written
    b: Written
    a_cells: list[bytes]


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Template:
    path = tmp_path_factory.mktemp("crash") / "template"
    with cenotaph.open(path) as store:
        a = populate(store, A, "A", short=5, long=1)
        b = populate(store, B, "B", short=5, long=1)
    a_cells = cells(path / DB, a.ids, immutable=True)
    return Template(path, a, b, a_cells)


def _crash(data: Path, point: str, mode: str) -> list[str]:
    """Run the child until it SIGKILLs itself at ``point``; return the lines it printed. (The scan
    worker it may have started dies with it, as in a power cut.)"""
    child = run("erasure-forget", fault=point, data=str(data), mode=mode)
    assert child.killed, f"the child was not killed at {point} (exit {child.returncode}): {child.stderr}"
    assert child.lines and child.lines[0] == "opened", child.stderr
    return child.lines


def _subject_requests(store: cenotaph.Store) -> list[cenotaph.ErasureRequest]:
    return [r for r in store.erasures() if r.target_kind == "subject"]


def _assert_erased_and_verified(store: cenotaph.Store, data: Path, t: Template) -> cenotaph.ErasureRequest:
    assert_gone(store, t.a)  # before purging: the reopened store already applied the forget
    assert_write_refused(store, t.a)
    (request,) = _subject_requests(store)
    assert request.mode == "compliance"
    assert request.status().state in ("shredded", "purged", "verified")
    report = store.purge()
    assert report.requests[request.id] == "verified", request.status().gaps
    status = store.confirm_erasure(request.id)
    assert status.layers["scan"].evidence["matches"] == 0
    assert status.layers["scan"].evidence["probes"] > 0
    cenotaph.verify_certificate(store.attest(request.id).to_json(), store.public_key)
    assert_gone(store, t.a)
    found = residue(data, texts=[t.a.canary], blobs=t.a_cells)
    assert found["text_hits"] == [] and found["window_hits"] == [], found
    return request


def _crash_a_copy(tmp_path: Path, template: Template, point: str, purge: str) -> tuple[Path, list[str]]:
    """A fresh copy of the template store, and the lines of a child killed at ``point`` in it."""
    data = tmp_path / "data"
    shutil.copytree(template.path, data)
    return data, _crash(data, point, purge)


@pytest.mark.parametrize("point", FORGET_POINTS)
def test_a_forget_killed_at_any_point_is_all_or_nothing(
    tmp_path: Path, template: Template, point: str
) -> None:
    data, lines = _crash_a_copy(tmp_path, template, point, "auto")
    assert not any(line.startswith("returned") for line in lines), (
        "the forget must not return past its fault point"
    )

    with cenotaph.open(data) as store:
        assert_readable(store, template.b)
        if point in REACHED_LEDGER:
            _assert_erased_and_verified(store, data, template)
        elif store.get(template.a.ids[0]) is not None:
            # nothing happened: every record of a readable, no request, no tombstone
            assert_readable(store, template.a)
            assert _subject_requests(store) == []
            store.purge()
            assert_readable(store, template.a)
            store.write(A, "after", "a write to a is not blocked")
        else:
            _assert_erased_and_verified(store, data, template)
        assert_readable(store, template.b)

    with cenotaph.open(data) as again:  # and it stays that way
        assert_readable(again, template.b)
        if point in REACHED_LEDGER:
            assert_gone(again, template.a)


@pytest.mark.parametrize("point", PURGE_POINTS)
def test_an_explicit_purge_killed_at_any_step_resumes_to_verified(
    tmp_path: Path, template: Template, point: str
) -> None:
    data, lines = _crash_a_copy(tmp_path, template, point, "explicit")
    returned = [line for line in lines if line.startswith("returned ")]
    assert len(returned) == 1, lines
    _, request_id, state = returned[0].split()
    assert state == "shredded"
    assert "purged" not in lines

    with cenotaph.open(data, auto_purge="off") as store:
        assert_gone(store, template.a)  # W7: the forget returned, so a crash cannot undo it
        assert_write_refused(store, template.a)
        assert_readable(store, template.b)
        request = store.erasure(request_id)
        before = request.status().state
        assert before in ("shredded", "purged", "verified")
        if point == "purge.done":
            assert before == "verified", "the verdict was recorded before the crash"
        report = store.purge()
        assert report.requests[request_id] == "verified", request.status().gaps
        assert store.confirm_erasure(request_id).state == "verified"
        assert_gone(store, template.a)
        assert_readable(store, template.b)
    found = residue(data, texts=[template.a.canary], blobs=template.a_cells)
    assert found["text_hits"] == [] and found["window_hits"] == [], found

    with cenotaph.open(data) as again:
        assert_gone(again, template.a)
        assert_write_refused(again, template.a)
        assert_readable(again, template.b)
        assert again.erasure(request_id).status().state == "verified"
