"""API keys: the secret is shown once and kept only as a keyed hash; guesses, forgeries,
revocations and edited key files all authenticate nobody."""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import stat
from pathlib import Path

import pytest

from cenotaph.errors import InvalidValueError, NotFoundError, StorageError
from cenotaph.service.apikeys import ApiKey, ApiKeyRing, Role


@pytest.fixture
def ring(tmp_path: Path) -> ApiKeyRing:
    return ApiKeyRing(tmp_path)


def _keys_file(tmp_path: Path) -> Path:
    return tmp_path / "api-keys" / "keys.json"


def _edit(tmp_path: Path, key_id: str, **changes: object) -> None:
    path = _keys_file(tmp_path)
    doc = json.loads(path.read_text())
    for entry in doc["keys"]:
        if entry["id"] == key_id:
            entry.update(changes)
    path.write_text(json.dumps(doc))


def test_create_authenticate_list_revoke(ring: ApiKeyRing) -> None:
    key, secret = ring.create(tenant="acme", prefix="tenant:acme/user:alice", role="agent")
    assert isinstance(key, ApiKey)
    assert (key.tenant, key.prefix, key.role, key.revoked_at) == (
        "acme",
        "tenant:acme/user:alice",
        Role.AGENT,
        None,
    )
    assert key.role == "agent" and isinstance(key.role, Role)
    assert ring.authenticate(secret) == key
    operator, _ = ring.create(tenant="tenant:acme", role=Role.OPERATOR)  # "tenant:" is optional
    assert (operator.tenant, operator.prefix, operator.role) == ("acme", "tenant:acme", Role.OPERATOR)
    assert [k.id for k in ring.list()] == [key.id, operator.id]
    ring.revoke(key.id)
    assert ring.authenticate(secret) is None
    ring.revoke(key.id)  # idempotent
    listed = {k.id: k for k in ring.list()}
    assert listed[key.id].revoked_at is not None and listed[operator.id].revoked_at is None


def test_key_is_frozen(ring: ApiKeyRing) -> None:
    key, _ = ring.create(tenant="acme", role="agent")
    with pytest.raises(AttributeError):
        key.prefix = "tenant:other"  # type: ignore[misc]


def test_the_secret_is_never_stored(tmp_path: Path, ring: ApiKeyRing) -> None:
    _, secret = ring.create(tenant="acme", role="operator")
    random_part = secret[21:]
    plain_hash = hashlib.sha256(secret.encode()).hexdigest()
    for path in (tmp_path / "api-keys").iterdir():
        data = path.read_bytes()
        for needle in (secret, random_part, base64.urlsafe_b64decode(random_part + "=").hex(), plain_hash):
            assert needle.encode() not in data, f"{path.name} holds the secret in some form"


def test_files_are_private(tmp_path: Path, ring: ApiKeyRing) -> None:
    ring.create(tenant="acme", role="agent")
    directory = tmp_path / "api-keys"
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    for name in ("pepper", "keys.json"):
        assert stat.S_IMODE((directory / name).stat().st_mode) == 0o600


@pytest.mark.parametrize(
    "forge",
    [
        lambda s: s[:-1],  # truncated
        lambda s: s + "A",  # extended
        lambda s: s[:-1] + ("B" if s[-1] != "B" else "C"),  # one character changed
        lambda s: s.upper(),
        lambda s: s.split("_", 2)[0] + "_" + s.split("_", 2)[1] + "_" + secrets.token_urlsafe(32),  # right id
        lambda s: "cnk_" + secrets.token_hex(8) + "_" + s[21:],  # wrong id
        lambda s: "Bearer " + s,
        lambda s: " " + s,
        lambda s: s + "\n",
        lambda s: "",
        lambda s: "x" * 10_000,
    ],
)
def test_a_forged_or_guessed_secret_authenticates_nobody(ring: ApiKeyRing, forge: object) -> None:
    _, secret = ring.create(tenant="acme", role="operator")
    forged = forge(secret)  # type: ignore[operator]
    assert forged != secret
    assert ring.authenticate(forged) is None


@pytest.mark.parametrize("value", [None, 0, b"cnk_", ["cnk_"], object()])
def test_non_string_secrets_authenticate_nobody(ring: ApiKeyRing, value: object) -> None:
    ring.create(tenant="acme", role="agent")
    assert ring.authenticate(value) is None


def test_secret_of_another_ring_authenticates_nobody(tmp_path: Path, ring: ApiKeyRing) -> None:
    _, other_secret = ApiKeyRing(tmp_path / "other").create(tenant="acme", role="operator")
    assert ring.authenticate(other_secret) is None


def test_revocation_by_another_process_takes_effect_at_the_next_call(
    tmp_path: Path, ring: ApiKeyRing
) -> None:
    key, secret = ring.create(tenant="acme", role="agent")
    assert ring.authenticate(secret) == key
    ApiKeyRing(tmp_path).revoke(key.id)  # the CLI, say
    assert ring.authenticate(secret) is None


def test_a_key_created_elsewhere_authenticates_at_once(tmp_path: Path, ring: ApiKeyRing) -> None:
    assert ring.authenticate("cnk_" + "0" * 16 + "_" + "A" * 43) is None  # loads an empty ring
    key, secret = ApiKeyRing(tmp_path).create(tenant="acme", role="agent")
    assert ring.authenticate(secret) == key


@pytest.mark.parametrize(
    "changes",
    [
        {"role": "operator"},
        {"prefix": "tenant:acme"},
        {"tenant": "globex", "prefix": "tenant:globex"},
        {"created_at": "2000-01-01T00:00:00+00:00"},
    ],
)
def test_an_edited_entry_authenticates_nobody(
    tmp_path: Path, ring: ApiKeyRing, changes: dict[str, object]
) -> None:
    key, secret = ring.create(tenant="acme", prefix="tenant:acme/user:alice", role="agent")
    _edit(tmp_path, key.id, **changes)
    assert ring.authenticate(secret) is None
    with pytest.raises(StorageError, match=key.id) as info:
        ring.list()
    assert secret not in str(info.value)


def test_removing_a_revocation_does_not_bring_the_key_back(tmp_path: Path, ring: ApiKeyRing) -> None:
    key, secret = ring.create(tenant="acme", role="agent")
    ring.revoke(key.id)
    _edit(tmp_path, key.id, revoked_at=None)
    assert ring.authenticate(secret) is None


def test_swapping_hashes_between_entries_authenticates_nobody(tmp_path: Path, ring: ApiKeyRing) -> None:
    agent, agent_secret = ring.create(tenant="acme", prefix="tenant:acme/user:a", role="agent")
    operator, _ = ring.create(tenant="acme", role="operator")
    doc = json.loads(_keys_file(tmp_path).read_text())
    by_id = {e["id"]: e for e in doc["keys"]}
    by_id[operator.id]["hash"] = by_id[agent.id]["hash"]  # the agent's secret on the operator's entry
    _keys_file(tmp_path).write_text(json.dumps(doc))
    assert ring.authenticate(agent_secret) == agent  # still only what it was
    forged = agent_secret.replace(agent.id[3:], operator.id[3:])
    assert ring.authenticate(forged) is None


def test_a_planted_entry_authenticates_nobody(tmp_path: Path, ring: ApiKeyRing) -> None:
    ring.create(tenant="acme", role="agent")
    secret = "cnk_" + "1" * 16 + "_" + secrets.token_urlsafe(32)
    doc = json.loads(_keys_file(tmp_path).read_text())
    planted = dict(doc["keys"][0], id="ak_" + "1" * 16, role="operator")
    planted["hash"] = hashlib.sha256(secret.encode()).hexdigest()
    doc["keys"].append(planted)
    _keys_file(tmp_path).write_text(json.dumps(doc))
    assert ring.authenticate(secret) is None


def test_a_new_pepper_invalidates_every_key(tmp_path: Path, ring: ApiKeyRing) -> None:
    _, secret = ring.create(tenant="acme", role="agent")
    (tmp_path / "api-keys" / "pepper").write_bytes(secrets.token_bytes(32))
    assert ApiKeyRing(tmp_path).authenticate(secret) is None


def test_a_damaged_pepper_or_key_file_is_refused(tmp_path: Path, ring: ApiKeyRing) -> None:
    ring.create(tenant="acme", role="agent")
    _keys_file(tmp_path).write_text("{not json")
    with pytest.raises(StorageError, match="corrupt"):
        ring.list()
    (tmp_path / "api-keys" / "pepper").write_bytes(b"short")
    with pytest.raises(StorageError, match="pepper"):
        ApiKeyRing(tmp_path)


@pytest.mark.parametrize(
    ("tenant", "prefix", "role", "message"),
    [
        ("acme", "tenant:globex", "agent", "inside tenant:acme"),
        ("acme", "tenant:acmeX/user:a", "agent", "inside tenant:acme"),
        ("acme", "user:alice", "agent", "inside tenant:acme"),
        ("acme", "tenant:acme", "admin", "role"),
        ("a/b", None, "agent", "tenant"),
        ("", None, "agent", "tenant"),
        (7, None, "agent", "tenant"),
    ],
)
def test_bad_bindings_are_refused(
    ring: ApiKeyRing, tenant: object, prefix: object, role: str, message: str
) -> None:
    with pytest.raises(InvalidValueError, match=message):
        ring.create(tenant=tenant, prefix=prefix, role=role)  # type: ignore[arg-type]


def test_bad_prefix_syntax_is_refused(ring: ApiKeyRing) -> None:
    with pytest.raises(ValueError):
        ring.create(tenant="acme", prefix="tenant:acme//user:a", role="agent")


def test_revoking_an_unknown_key(ring: ApiKeyRing) -> None:
    with pytest.raises(NotFoundError):
        ring.revoke("ak_0000000000000000")
