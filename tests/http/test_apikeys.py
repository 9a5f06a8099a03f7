"""API keys: the secret is shown once and kept only as a keyed hash; guesses, forgeries,
revocations and edited key files all authenticate nobody."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import shutil
import stat
from pathlib import Path

import pytest

import cenotaph
from cenotaph.erasure.proof.scanner import ResidueScanner, text_probes
from cenotaph.errors import InvalidValueError, NotFoundError, StorageError
from cenotaph.scope import Scope
from cenotaph.service.apikeys import ApiKey, ApiKeyRing, Role


@pytest.fixture
def ring(tmp_path: Path) -> ApiKeyRing:
    return ApiKeyRing(tmp_path)


def _keys_file(tmp_path: Path) -> Path:
    return tmp_path / "api-keys" / "keys.json"


def _pepper(tmp_path: Path) -> bytes:
    return (tmp_path / "api-keys" / "pepper").read_bytes()


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
        {"created_at": "2000-01-01T00:00:00+00:00"},
        {"id": "ak_" + "2" * 16},
        {"binding": ""},
        {"binding": None},
        {"binding": "not base64!"},
        {"erased_at": "2000-01-01T00:00:00+00:00"},
    ],
)
def test_an_edited_entry_authenticates_nobody(
    tmp_path: Path, ring: ApiKeyRing, changes: dict[str, object]
) -> None:
    key, secret = ring.create(tenant="acme", prefix="tenant:acme/user:alice", role="agent")
    _edit(tmp_path, key.id, **changes)
    assert ring.authenticate(secret) is None
    with pytest.raises(StorageError, match=key.id if "id" not in changes else "edited") as info:
        ring.list()
    assert secret not in str(info.value)


def test_a_flipped_bit_in_the_binding_authenticates_nobody(tmp_path: Path, ring: ApiKeyRing) -> None:
    key, secret = ring.create(tenant="acme", prefix="tenant:acme/user:alice", role="agent")
    doc = json.loads(_keys_file(tmp_path).read_text())
    sealed = bytearray(base64.urlsafe_b64decode(doc["keys"][0]["binding"]))
    sealed[20] ^= 1
    _edit(tmp_path, key.id, binding=base64.urlsafe_b64encode(bytes(sealed)).decode())
    assert ring.authenticate(secret) is None


def test_clear_fields_added_by_hand_change_nothing(tmp_path: Path, ring: ApiKeyRing) -> None:
    """The binding is sealed: a role or prefix written beside it in clear is not read at all."""
    key, secret = ring.create(tenant="acme", prefix="tenant:acme/user:alice", role="agent")
    _edit(tmp_path, key.id, role="operator", prefix="tenant:acme", tenant="globex")
    assert ring.authenticate(secret) == key


def test_the_file_holds_no_scope_id_in_clear(tmp_path: Path, ring: ApiKeyRing) -> None:
    ring.create(tenant="acme7f3a9c21", prefix="tenant:acme7f3a9c21/user:alice-0123456789", role="agent")
    ring.create(tenant="acme7f3a9c21", role="operator")
    scanner = ResidueScanner(
        [
            *text_probes("tenant:acme7f3a9c21"),
            *text_probes("acme7f3a9c21/"),
            *text_probes("user:alice-0123456789"),
            *text_probes('"acme7f3a9c21"'),
        ]
    )
    result = scanner.scan(tmp_path / "api-keys")
    assert result.files >= 2 and result.positive_control
    assert result.matches == 0, result.matched_files


def test_the_data_directory_alone_does_not_open_the_keys(tmp_path: Path, ring: ApiKeyRing) -> None:
    """A copy of the data directory's api-keys/ beside another keyring: nothing opens, nothing
    authenticates (the bindings are sealed under the store's key provider, kept elsewhere)."""
    key, secret = ring.create(tenant="acme", prefix="tenant:acme/user:alice", role="agent")
    elsewhere = tmp_path / "copy"
    shutil.copytree(tmp_path / "api-keys", elsewhere / "api-keys")
    copy = ApiKeyRing(elsewhere)  # the same pepper, another keyring (copy/keyring)
    assert copy.authenticate(secret) is None
    assert copy.get(key.id) is None
    with pytest.raises(StorageError, match=key.id):
        copy.list()


def test_swapping_bindings_between_entries_authenticates_nobody(tmp_path: Path, ring: ApiKeyRing) -> None:
    agent, agent_secret = ring.create(tenant="acme", prefix="tenant:acme/user:a", role="agent")
    operator, _ = ring.create(tenant="acme", role="operator")
    doc = json.loads(_keys_file(tmp_path).read_text())
    by_id = {e["id"]: e for e in doc["keys"]}
    by_id[agent.id]["binding"] = by_id[operator.id]["binding"]  # the operator's binding on the agent
    _keys_file(tmp_path).write_text(json.dumps(doc))
    assert ring.authenticate(agent_secret) is None


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
    planted = dict(doc["keys"][0], id="ak_" + "1" * 16)  # another key's sealed binding
    planted["hash"] = hmac.new(
        _pepper(tmp_path), b"cenotaph-api-key\0" + secret.encode(), "sha256"
    ).hexdigest()
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


# -- files written before bindings were sealed -----------------------------------------------------
# -- subject erasure -------------------------------------------------------------------------------
def test_a_subject_erasure_revokes_the_keys_bound_inside_it(tmp_path: Path, ring: ApiKeyRing) -> None:
    subject = "tenant:acme/user:alice-7f3a9c21"
    inside, inside_secret = ring.create(tenant="acme", prefix=subject, role="agent")
    deeper, deeper_secret = ring.create(tenant="acme", prefix=f"{subject}/session:s1", role="operator")
    revoked, _ = ring.create(tenant="acme", prefix=subject, role="agent")
    ring.revoke(revoked.id)
    revoked_at = ring.list()[-1].revoked_at
    above, above_secret = ring.create(tenant="acme", role="operator")
    sibling, sibling_secret = ring.create(
        tenant="acme", prefix="tenant:acme/user:alice-7f3a9c2", role="agent"
    )
    before = _keys_file(tmp_path).read_bytes()
    sealed = [
        base64.urlsafe_b64decode(e["binding"])
        for e in json.loads(before)["keys"]
        if e["id"] in (inside.id, deeper.id, revoked.id)
    ]

    assert sorted(ring.erase_subject(subject)) == sorted([inside.id, deeper.id, revoked.id])

    assert ring.authenticate(inside_secret) is None and ring.authenticate(deeper_secret) is None
    assert ring.authenticate(above_secret) == above and ring.authenticate(sibling_secret) == sibling
    listed = {k.id: k for k in ring.list()}
    for key_id in (inside.id, deeper.id, revoked.id):
        key = listed[key_id]
        assert key.erased_at is not None and key.revoked_at is not None
        assert (key.tenant, key.prefix) == ("acme", "tenant:acme")  # the scope just above the subject
    assert revoked_at is not None and listed[revoked.id].revoked_at == revoked_at  # kept as it was
    # nothing of the subject is left in api-keys/: not in clear, not even its old sealed bindings
    probes = [*text_probes(subject), *text_probes("alice-7f3a9c21/")]
    for blob in sealed:
        probes += [blob[i : i + 16] for i in range(0, len(blob) - 16, 8)]
    result = ResidueScanner(probes).scan(tmp_path / "api-keys")
    assert result.positive_control and result.matches == 0, result.matched_files


def test_erasing_the_tenant_itself_keeps_no_binding(ring: ApiKeyRing) -> None:
    key, secret = ring.create(tenant="acme", prefix="tenant:acme/user:alice", role="agent")
    other, other_secret = ring.create(tenant="globex", role="operator")
    assert ring.erase_subject("tenant:acme") == [key.id]
    assert ring.authenticate(secret) is None and ring.authenticate(other_secret) == other
    erased = ring.get(key.id)
    assert erased is not None and (erased.tenant, erased.prefix) == ("", "")
    assert erased.to_dict()["tenant"] is None and not erased.covers(Scope.parse("tenant:acme"))


@pytest.mark.parametrize(
    "subject", ["idp:42", "tenant:acme/user:bob", "tenant:acme/user:alic", "tenant:globex"]
)
def test_an_erasure_of_another_subject_leaves_the_key_alone(ring: ApiKeyRing, subject: str) -> None:
    key, secret = ring.create(tenant="acme", prefix="tenant:acme/user:alice", role="agent")
    assert ring.erase_subject(subject) == []
    assert ring.authenticate(secret) == key


def test_service_keys_come_from_the_key_provider_one_per_purpose(tmp_path: Path) -> None:
    """What the server keeps beside the keys is keyed by the provider, never by the pepper: the
    ring of a data directory and of the open store agree, purposes differ, another keyring
    differs, and replacing the pepper changes nothing."""
    with cenotaph.open(tmp_path / "a") as store:
        from_store = ApiKeyRing(store)
        owners = from_store.service_key("http-owners")
        assert owners == ApiKeyRing(tmp_path / "a").service_key("http-owners")
        assert owners != from_store.service_key("http-cursors")
        assert _pepper(tmp_path / "a") not in (owners, from_store.service_key("http-cursors"))
        (tmp_path / "a" / "api-keys" / "pepper").write_bytes(secrets.token_bytes(32))
        assert ApiKeyRing(tmp_path / "a").service_key("http-owners") == owners
    with cenotaph.open(tmp_path / "b") as other:
        assert ApiKeyRing(other).service_key("http-owners") != owners
    with pytest.raises(InvalidValueError):
        from_store.service_key("api-keys")  # the bindings' own key is not handed out
