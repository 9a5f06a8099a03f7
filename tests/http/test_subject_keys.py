"""API keys bound inside an erased subject go with it: a subject erasure through the server (or
``cenotaph forget-subject``) revokes them and leaves nothing of the subject in ``api-keys/``,
in clear or sealed, while the tenant's operator still follows the request."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import httpx
from click.testing import CliRunner
from tests.http._support import Tenant, World, wait_verified

import cenotaph
from cenotaph.cli.main import cli
from cenotaph.erasure.proof.scanner import ResidueScanner, text_probes
from cenotaph.service.apikeys import ApiKeyRing


def _sealed_bindings(keys_dir: Path, ids: set[str]) -> list[bytes]:
    doc = json.loads((keys_dir / "keys.json").read_text())
    return [base64.urlsafe_b64decode(e["binding"]) for e in doc["keys"] if e["id"] in ids]


def _windows(blobs: list[bytes]) -> list[bytes]:
    return [blob[i : i + 16] for blob in blobs for i in range(0, len(blob) - 16, 8)]


def test_a_subject_erasure_takes_the_keys_bound_inside_it(
    api: httpx.Client, tenant: Tenant, world: World
) -> None:
    subject = f"{tenant.alice}-7f3a9c21d4"
    ring = world.keys
    agent_key, agent = ring.create(tenant=tenant.id, prefix=subject, role="agent")
    session_key, session_agent = ring.create(tenant=tenant.id, prefix=f"{subject}/session:s1", role="agent")
    h = {"Authorization": f"Bearer {agent}"}
    r = api.post("/v1/memories", json={"scope": subject, "key": "diet", "value": "vegetarian"}, headers=h)
    assert r.status_code == 201, r.text
    before = _sealed_bindings(ring.path, {agent_key.id, session_key.id})

    ho = tenant.auth(tenant.operator)
    erased = api.post(f"/v1/subjects/{subject}/forget", headers=ho)
    assert erased.status_code == 202, erased.text
    # the keys bound inside the subject stop at once; the others are untouched
    for secret in (agent, session_agent):
        assert api.get("/v1/key", headers={"Authorization": f"Bearer {secret}"}).status_code == 401
    assert api.get("/v1/key", headers=tenant.auth(tenant.agent)).status_code == 200  # alice, not alice-7f...
    # the tenant's operator still follows the request, and its certificate
    doc = wait_verified(api, erased.json()["status_url"], tenant.operator)
    assert doc["status"]["state"] == "verified"
    assert api.get(f"{erased.json()['status_url']}/certificate", headers=ho).status_code == 200
    listed = api.get("/v1/erasures", headers=ho).json()["erasures"]
    assert erased.json()["request_id"] in {e["id"] for e in listed}
    # a residue scan of api-keys/ finds nothing of the subject: not in clear, not its old bindings
    probes = [*text_probes(subject), *text_probes("alice-7f3a9c21d4"), *_windows(before)]
    result = ResidueScanner(probes).scan(ring.path)
    assert result.positive_control and result.files >= 2
    assert result.matches == 0, result.matched_files
    # and nothing of the subject's scope id in clear anywhere in the data directory
    whole = ResidueScanner([*text_probes(subject), *text_probes("alice-7f3a9c21d4")]).scan(world.data)
    assert whole.matches == 0, whole.matched_files


def test_an_operator_bound_to_the_subject_itself_erases_it_and_its_own_key(
    api: httpx.Client, tenant: Tenant, world: World
) -> None:
    subject = f"{tenant.root}/user:dora"
    own = world.keys.create(tenant=tenant.id, prefix=subject, role="operator")[1]
    erased = api.post(f"/v1/subjects/{subject}/forget", headers=tenant.auth(own))
    assert erased.status_code == 202
    assert api.get("/v1/key", headers=tenant.auth(own)).status_code == 401
    doc = wait_verified(api, erased.json()["status_url"], tenant.operator)  # the tenant operator sees it
    assert doc["id"] == erased.json()["request_id"]


def test_cli_forget_subject_revokes_the_keys_too(tmp_path: Path) -> None:
    data = tmp_path / "data"
    subject = "tenant:acme/user:erin-0123456789"
    with cenotaph.open(data) as store:
        store.write(subject, "k", "v")
        ring = ApiKeyRing(store)
        key, secret = ring.create(tenant="acme", prefix=subject, role="agent")
        before = _sealed_bindings(ring.path, {key.id})
    result = CliRunner().invoke(cli, ["forget-subject", subject, "--data", str(data)])
    assert result.exit_code == 0, result.output
    with cenotaph.open(data) as store:
        ring = ApiKeyRing(store)
        assert ring.authenticate(secret) is None
        erased = ring.get(key.id)
        assert erased is not None and erased.erased_at is not None
    scan = ResidueScanner([*text_probes(subject), *_windows(before)]).scan(data / "api-keys")
    assert scan.matches == 0 and scan.positive_control
