"""The backend-neutral conformance suite, run again against ``cenotaph.Client`` over HTTP.

Every conformance test that needs only a fresh ``store`` (or a ``clocked`` one and its ``clock``)
runs here with that store a remote client (an operator key for ``tenant:t``, the suite's tenant) of
a fresh server over a fresh data directory; a clocked server's store keeps its TTLs on the test's
``ManualClock``. Tests that restart, twin or inspect the store's files need the library in-process and
stay in ``tests/conformance``. Where the server answers differently by design, the test is marked
``xfail(strict=True)`` with the reason (``DEVIATIONS``): if it ever passes, the mark must go.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, cast

import httpx
import pytest
from fastapi.testclient import TestClient
from tests.conformance import test_dominance, test_modes, test_read_path, test_scope_closure, test_session
from tests.kit.clock import ManualClock

import cenotaph
from cenotaph.clock import SYSTEM_CLOCK, Clock
from cenotaph.service.apikeys import ApiKeyRing
from cenotaph.service.http import create_app

MODULES = (test_read_path, test_dominance, test_modes, test_session, test_scope_closure)
FOREIGN_SUBJECT = (
    "over HTTP a write's extra subjects must be scope paths inside the key's prefix "
    "(an opaque subject such as 'idp:...' could belong to any tenant)"
)
OUTSIDE = "it writes outside tenant:t, which a key bound to tenant:t can never reach (404)"
UNSEEN_SOURCE = (
    "over HTTP a derived_from id the key cannot read (forgotten, expired, foreign or unknown) answers "
    "one 404 (NotFoundError), never DerivedFromForgottenError: an id from another tenant reveals nothing"
)
DEVIATIONS: dict[str, str] = {
    "test_unusual_but_valid_names_round_trip": OUTSIDE,
    "test_default_subjects_are_per_tenant": OUTSIDE,
    "test_forgetting_a_parent_scope_covers_children_written_later_elsewhere_in_the_tree": OUTSIDE,
    "test_get_by_id_returns_the_whole_record": FOREIGN_SUBJECT,
    "test_a_compliance_forget_returns_at_shredded_or_later": FOREIGN_SUBJECT,
    "test_derived_records_inherit_subjects_so_forget_subject_reaches_them": FOREIGN_SUBJECT,
    "test_a_compliance_forget_of_an_expired_source_still_reaches_derived_records": UNSEEN_SOURCE,
    "test_a_compliance_forget_of_a_source_forgets_session_derived_records": UNSEEN_SOURCE,
    "test_a_subject_tombstone_blocks_that_subject_in_any_scope": FOREIGN_SUBJECT,
    "test_a_subject_tombstone_is_lifted_only_by_a_subject_token": FOREIGN_SUBJECT,
    "test_one_token_reopens_a_target_forgotten_by_a_scope_forget_and_a_subject_erasure": FOREIGN_SUBJECT,
    "test_explicit_subjects_add_to_the_defaults": FOREIGN_SUBJECT,
    "test_a_write_rejected_by_compare_and_set_does_not_consume_the_token": FOREIGN_SUBJECT,
    "test_a_write_derived_from_an_operationally_forgotten_record_is_refused": UNSEEN_SOURCE,
}
# the server purges in the background, so a request may verify between the test's two calls
SKIPPED = {"test_a_compliance_forget_is_not_reported_erased_before_evidence"}


def _only_needs_a_store(func: Callable[..., Any]) -> bool:
    params = set(inspect.signature(func).parameters)
    stores = {"store"} if "store" in params else {"clocked", "clock"}
    marks = {
        a
        for m in getattr(func, "pytestmark", [])
        if m.name == "parametrize"
        for a in str(m.args[0]).split(",")
    }
    return stores <= params and params - stores <= {a.strip() for a in marks}


def _collect() -> dict[str, Callable[..., Any]]:
    found = {}
    for module in MODULES:
        for name, func in vars(module).items():
            if (
                name.startswith("test_")
                and name not in SKIPPED
                and callable(func)
                and _only_needs_a_store(func)
            ):
                reason = DEVIATIONS.get(name)
                found[name] = pytest.mark.xfail(reason=reason, strict=True)(func) if reason else func
    return found


globals().update(_collect())


def _remote(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, clock: Clock) -> Iterator[cenotaph.Client]:
    """A fresh server over a fresh store on ``clock``, reached with an operator key for the whole tenant:t."""
    monkeypatch.delenv("CENOTAPH_KEYRING", raising=False)
    monkeypatch.delenv("CENOTAPH_MASTER_KEY", raising=False)
    data = tmp_path / "data"
    backing = cenotaph.open(data, clock=clock)
    keys = ApiKeyRing(data)
    secret = keys.create(tenant="t", role="operator")[1]
    app = create_app(backing, keys, console=False)
    try:
        with (
            TestClient(app, base_url="http://testserver") as http,
            # starlette's TestClient subclasses httpx2.Client, httpx's API under another name
            cenotaph.Client("http://testserver", secret, http_client=cast(httpx.Client, http)) as client,
        ):
            yield client
    finally:
        backing.close()


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[cenotaph.Client]:
    yield from _remote(tmp_path, monkeypatch, SYSTEM_CLOCK)


@pytest.fixture
def clocked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, clock: ManualClock) -> Iterator[cenotaph.Client]:
    yield from _remote(tmp_path, monkeypatch, clock)


def test_the_remote_suite_is_not_empty() -> None:
    collected = _collect()
    assert len(collected) >= 55, sorted(collected)
    assert set(DEVIATIONS) <= set(collected)
