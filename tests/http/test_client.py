"""cenotaph.Client: the Store's methods over HTTP, with the same model types and the same errors."""

from __future__ import annotations

import inspect
import re
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
from tests.http._support import Tenant, World

import cenotaph
from cenotaph import client as client_module
from cenotaph.errors import (
    AccessDeniedError,
    ErasureNotProvableError,
    ForgottenError,
    InvalidScopeError,
    InvalidValueError,
    NotFoundError,
    ScopeClosureError,
    StaleWriteError,
    StorageError,
)


def test_import_cenotaph_needs_no_httpx_and_client_is_public() -> None:
    code = "import sys, cenotaph; assert 'httpx' not in sys.modules and 'fastapi' not in sys.modules; cenotaph.Client; assert 'fastapi' not in sys.modules; print('ok')"
    assert (
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
        == "ok\n"
    )
    assert "Client" in cenotaph.__all__ and cenotaph.Client is client_module.Client


def test_records_and_hits_are_the_library_types(remote: cenotaph.Client, tenant: Tenant) -> None:
    rec = remote.write(
        tenant.alice, "diet", {"likes": "tea"}, ttl=timedelta(hours=1), metadata={"topic": "food"}
    )
    assert (
        isinstance(rec, cenotaph.Record) and rec.expires_at is not None and rec.metadata == {"topic": "food"}
    )
    assert remote.read(f"{tenant.alice}/session:s1", "diet") == rec
    assert remote.get(rec.id) == rec
    hits = remote.search(tenant.alice, "tea", filter={"topic": "food"})
    assert [type(h) for h in hits] == [cenotaph.SearchHit] and hits[0].record == rec
    batch = remote.write_many([{"scope": tenant.alice, "key": f"b{n}", "value": n} for n in range(3)])
    assert [r.value for r in batch] == [0, 1, 2]
    with pytest.raises(StaleWriteError):
        remote.write(tenant.alice, "b0", 9, base_version=batch[0].version - 1)


def test_list_and_export_follow_every_page(
    remote: cenotaph.Client, tenant: Tenant, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(client_module, "_PAGE", 3)
    remote.write_many([{"scope": tenant.alice, "key": f"k{n:02d}", "value": n} for n in range(10)])
    assert [r.key for r in remote.list(tenant.alice)] == [f"k{n:02d}" for n in range(10)]
    assert len(remote.export_subject(tenant.alice)["records"]) == 10


def test_errors_are_the_library_errors(remote: cenotaph.Client, tenant: Tenant, world: World) -> None:
    with pytest.raises(InvalidScopeError):
        remote.write("tenant:x//y", "k", 1)
    with pytest.raises(InvalidValueError):
        remote.write(tenant.alice, "k", {1, 2})  # not JSON: refused before it is sent
    with pytest.raises(InvalidValueError):
        remote.write(tenant.alice, "", 1)
    remote.write(tenant.alice, "gone", 1)
    request = remote.forget(tenant.alice, "gone")
    with pytest.raises(ForgottenError) as info:
        remote.write(tenant.alice, "gone", 2)
    assert info.value.version == request.version
    remote.write(tenant.alice, "shared", "ancestor copy")
    remote.write(f"{tenant.alice}/session:s1", "shared", "child copy")
    with pytest.raises(ScopeClosureError) as closure:
        remote.forget(f"{tenant.alice}/session:s1", "shared")
    assert closure.value.ancestors == (tenant.alice,)
    with pytest.raises(NotFoundError):
        remote.erasure("er_000000000000000000000000")
    op = remote.forget(tenant.alice, "shared", mode="operational", include_ancestors=True)
    with pytest.raises(ErasureNotProvableError) as gaps:
        remote.confirm_erasure(op.id)
    assert gaps.value.gaps
    with pytest.raises(InvalidValueError):
        remote.forget(tenant.alice, mode="gentle")


def test_reauthorization_and_erasure_handles(remote: cenotaph.Client, tenant: Tenant) -> None:
    remote.write(tenant.alice, "k", 1)
    request = remote.forget(tenant.alice, "k")
    token = remote.reauthorize(tenant.alice, "k")
    assert remote.write(tenant.alice, "k", 2, reauthorization=token).value == 2
    status = remote.erasure(request.id).wait(30)
    assert isinstance(status, cenotaph.ErasureStatus) and status.state == "verified"
    assert remote.confirm_erasure(request.id).state == "verified"
    assert request.id in {r.id for r in remote.erasures()}
    certificate = remote.attest(request.id)
    assert isinstance(certificate, cenotaph.Certificate)
    cenotaph.verify_certificate(certificate, remote.public_key)
    old = certificate["log"]["tree_head"]
    answer = remote.consistency_proof(old["tree_size"])
    head = remote.tree_head()
    assert cenotaph.verify_consistency(head, head, [], remote.public_key)[0] >= old["tree_size"]
    sizes = cenotaph.verify_consistency(old, answer["tree_head"], answer["proof"], remote.public_key)
    assert sizes[0] == old["tree_size"] <= sizes[1]


def test_operations(remote: cenotaph.Client) -> None:
    info = remote.backup()
    assert isinstance(info, cenotaph.BackupInfo) and info.bytes > 0
    assert info.id in remote.backups()
    epochs = remote.key_epochs()
    assert any(info.id in holds["backups"] for holds in epochs.values())
    report = remote.rotate_keys()
    assert isinstance(report, cenotaph.RotationReport) and set(info.epochs) <= set(report.retained_epochs)
    remote.release_backup(info.id)
    assert info.id not in remote.backups()
    assert isinstance(remote.purge(), cenotaph.PurgeReport)


def test_sessions_keep_the_read_set(remote: cenotaph.Client, tenant: Tenant) -> None:
    a = remote.write(tenant.alice, "a", "alpha")
    b = remote.write(tenant.alice, "b", "beta")
    with remote.session(tenant.alice) as s:
        s.read(tenant.alice, "a")
        s.search(tenant.alice, "beta")
        assert set(s.read_set) == {a.id, b.id}
        derived = s.write(tenant.alice, "c", "both")
    assert set(derived.derived_from) == {a.id, b.id}
    with pytest.raises(InvalidValueError, match="ended"):
        s.read(tenant.alice, "a")


def test_a_refused_key_or_role_is_access_denied(world: World, tenant: Tenant, transport: str) -> None:
    http = world.client(transport) if transport == "asgi" else None
    with cenotaph.Client(
        world.base_url(transport), "cnk_" + "0" * 16 + "_" + "A" * 43, http_client=http
    ) as bad:
        with pytest.raises(AccessDeniedError) as info:
            bad.read(tenant.alice, "k")
        assert info.value.status == 401
    with cenotaph.Client(world.base_url(transport), tenant.agent, http_client=http) as agent:
        with pytest.raises(AccessDeniedError) as info:
            agent.forget_subject(tenant.alice)
        assert info.value.status == 403
        assert agent.read(tenant.root, "anything") is None  # outside the prefix reads as empty
        assert agent.list(tenant.root) == [] and agent.search(tenant.root, "x") == []


def test_an_unreachable_server_is_a_storage_error() -> None:
    with (
        cenotaph.Client("http://127.0.0.1:1", "cnk_x", timeout=2) as nowhere,
        pytest.raises(StorageError, match="cannot reach"),
    ):
        nowhere.read("tenant:a", "k")
    for url in ("ftp://x", "", 7):
        with pytest.raises(InvalidValueError):
            cenotaph.Client(url, "k")  # type: ignore[arg-type]


def test_the_docs_name_every_client_method_and_public_key_as_a_property() -> None:
    docs = (Path(__file__).parents[2] / "docs" / "http.md").read_text()
    section = docs[docs.index("## Remote client") : docs.index("They return")]
    listed = {
        name.split("(")[0] for name in re.findall(r"`([a-z_]+)(?:\([^`]*\))?`", section.split("Methods:")[1])
    }
    methods = {
        name
        for name, member in vars(cenotaph.Client).items()
        if not name.startswith("_") and inspect.isfunction(member)
    }
    assert methods <= listed, f"not in docs/http.md: {sorted(methods - listed)}"
    assert isinstance(inspect.getattr_static(cenotaph.Client, "public_key"), property)
    assert "`public_key` is a property" in section and "public_key()" not in docs
