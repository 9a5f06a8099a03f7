"""Confinement to the prefix: a scope outside it answers exactly as if it did not exist.

Attacks: another tenant, a sibling user, an ancestor of the prefix, ``..``-like ids, encoded
separators, look-alike ids (a Cyrillic letter, another case; a trailing or zero-width space is
refused as malformed). For each, the answer with data outside equals the answer with nothing
there, nothing outside changes, and the store still holds what it held.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.kit.checks import present
from tests.mcp.mcp_kit import SESSION, TENANT, USER, Tools, dump, memory_client

import cenotaph

pytestmark = pytest.mark.anyio

OUTSIDE = [
    "tenant:globex/user:alice",  # another tenant, same user id
    "tenant:globex",
    "tenant:acme/user:bob",  # a sibling user
    "tenant:acme/user:bob/session:s1",
    TENANT,  # an ancestor of the prefix
    "tenant:acme/user:..",  # '..' is just an id: the user called '..', a sibling
    "tenant:acme/user:alice%2F..%2Fbob",  # an encoded separator is part of the id
    "tenant:acme/user:\u0430lice",  # a Cyrillic a
    "tenant:acme/user:Alice",
    "tenant:ACME/user:alice",
]
MALFORMED = [
    "tenant:acme/user:alice/..",
    "tenant:acme/user:alice/../user:bob",
    "/tenant:acme/user:alice",
    "tenant:acme/user:alice/",
    "tenant:acme//user:alice",
    "tenant:acme/user:alice ",  # a trailing space would be another id: refused
    "tenant:acme/user:al\u200bice",  # a zero-width space is not printable
    "tenant:acme/user:alice\nsession:x",
    "../tenant:acme",
    "",
]


async def answers(tools: Tools, scope: str) -> list[str]:
    """Everything the read tools say about a scope, as comparable text."""
    return [
        dump(await tools.ok("memory_read", key="secret", scope=scope)),
        dump(await tools.ok("memory_list", scope=scope)),
        dump(await tools.ok("memory_list", scope=scope, include_descendants=True)),
        dump(await tools.ok("memory_search", query="bob secret diagnosis", scope=scope)),
        await tools.refused("memory_write", key="secret", value="overwritten?", scope=scope),
        await tools.refused("memory_forget", key="secret", scope=scope),
        await tools.refused("memory_forget", scope=scope),
    ]


@pytest.mark.parametrize("outside", OUTSIDE)
async def test_outside_the_prefix_answers_as_if_nothing_were_there(tmp_path: Path, outside: str) -> None:
    with cenotaph.open(tmp_path / "full") as full, cenotaph.open(tmp_path / "empty") as empty:
        full.write(outside, "secret", "bob secret diagnosis")
        full.write(f"{outside}/doc:d", "secret", "bob secret diagnosis, a child copy")
        async with memory_client(full) as tools:
            with_data = await answers(tools, outside)
        async with memory_client(empty) as tools:
            without = await answers(tools, outside)
            missing_inside = dump(await tools.ok("memory_read", key="secret", scope=f"{USER}/session:none"))
        assert with_data == without
        assert with_data[0] == missing_inside  # and the same as a key that does not exist inside
        assert "bob secret" not in " ".join(with_data)
        assert (
            present(full.read(outside, "secret")).value == "bob secret diagnosis"
        )  # nothing outside changed
        assert full.erasures() == []


@pytest.mark.parametrize("malformed", MALFORMED)
async def test_a_malformed_scope_is_bad_input_whatever_it_names(
    mcp_store: cenotaph.Store, malformed: str
) -> None:
    mcp_store.write("tenant:acme/user:bob", "secret", "bob's")
    async with memory_client(mcp_store) as tools:
        for tool, arguments in (
            ("memory_read", {"key": "secret"}),
            ("memory_list", {}),
            ("memory_search", {"query": "bob"}),
            ("memory_write", {"key": "secret", "value": 1}),
            ("memory_forget", {"key": "secret"}),
        ):
            text = await tools.refused(tool, scope=malformed, **arguments)
            assert text.startswith(("invalid scope", "invalid arguments")), text
    assert present(mcp_store.read("tenant:acme/user:bob", "secret")).value == "bob's"


async def test_inside_the_prefix_every_depth_is_reachable(mcp_store: cenotaph.Store) -> None:
    async with memory_client(mcp_store) as tools:
        for scope in (USER, SESSION, f"{USER}/session:s2", f"{SESSION}/doc:a/page:1"):
            await tools.ok("memory_write", key="k", value=scope, scope=scope)
            assert (await tools.ok("memory_read", key="k", scope=scope))["record"]["value"] == scope


async def test_a_search_never_returns_or_taints_outside_records(mcp_store: cenotaph.Store) -> None:
    """Candidates outside the prefix are not read through the session: if one is forgotten
    later, the connection may still write (nothing it was shown was forgotten)."""
    outside = mcp_store.write(TENANT, "policy", "tennis club rules")
    async with memory_client(mcp_store) as tools:
        await tools.ok("memory_write", key="hobby", value="tennis on sundays")
        hits = (await tools.ok("memory_search", query="tennis club"))["hits"]
        assert [h["record"]["key"] for h in hits] == ["hobby"]
        assert (await tools.ok("memory_read", key="policy"))["found"] is False
        mcp_store.forget(TENANT, "policy", include_ancestors=False)
        await tools.ok("memory_write", key="after", value="still writable")
    assert mcp_store.read(TENANT, "policy") is None and outside.id


async def test_a_forget_whose_closure_reaches_outside_is_refused_and_changes_nothing(
    mcp_store: cenotaph.Store,
) -> None:
    mcp_store.write(TENANT, "k", "tenant copy")  # a read of k from the session falls through to it
    async with memory_client(mcp_store) as tools:
        await tools.ok("memory_write", key="k", value="session copy")
        text = await tools.refused("memory_forget", key="k")
        assert "wider scope" in text and "tenant copy" not in text
        assert (await tools.ok("memory_read", key="k"))["record"]["value"] == "session copy"
    assert present(mcp_store.read(TENANT, "k")).value == "tenant copy"
