"""A key's reach does not follow an edited database: a scope of another tenant re-parented under
the key's prefix (in ``cenotaph.db``, by another process, while the server runs) stays foreign."""

from __future__ import annotations

import subprocess
import sys

import httpx
from tests.http._support import Tenant, World

_EDIT = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
token = dict(conn.execute("SELECT id, scope_token FROM records WHERE id IN (?, ?)", sys.argv[2:4]))
conn.execute("UPDATE scopes SET parent = ? WHERE token = ?", (token[sys.argv[2]], token[sys.argv[3]]))
conn.close()
"""


def test_a_foreign_scope_reparented_under_my_prefix_is_not_listed(
    world: World, api: httpx.Client, tenant: Tenant, other: Tenant
) -> None:
    mine = api.post(
        "/v1/memories",
        json={"scope": tenant.alice, "key": "mine", "value": "kept"},
        headers=tenant.auth(tenant.agent),
    ).json()
    h = other.auth(other.agent)
    theirs = api.post(
        "/v1/memories", json={"scope": other.alice, "key": "s", "value": "canary-8e1"}, headers=h
    )
    assert api.get("/v1/memories", params={"scope": other.alice, "key": "s"}, headers=h).status_code == 200
    # another process, so that none of this process's file descriptors (and its locks) are touched
    args = [sys.executable, "-c", _EDIT, str(world.data / "cenotaph.db"), mine["id"], theirs.json()["id"]]
    subprocess.run(args, check=True)

    listed = api.get(
        "/v1/memories/list",
        params={"scope": tenant.alice, "include_descendants": "true"},
        headers=tenant.auth(tenant.agent),
    )
    assert listed.status_code == 200 and "canary-8e1" not in listed.text
    assert [r["id"] for r in listed.json()["records"]] == [mine["id"]]
    found = api.post(
        "/v1/search",
        json={"scope": tenant.alice, "query": "canary-8e1", "include_descendants": True},
        headers=tenant.auth(tenant.agent),
    )
    assert found.status_code == 200 and "canary-8e1" not in found.text
