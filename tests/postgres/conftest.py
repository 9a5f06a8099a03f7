"""Fixtures of the PostgreSQL backend's own tests: the shared server (``CENOTAPH_TEST_PG_DSN``)
and a fresh schema per test, dropped afterwards."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator

import psycopg
import pytest
from psycopg import sql

from cenotaph.backends.postgres import PostgresBackend, open_postgres

from ._cluster import Cluster, ClusterUnavailable

PG_DSN_ENV = "CENOTAPH_TEST_PG_DSN"  # e.g. postgresql://postgres@127.0.0.1:5432/test
CI_ENV = "CENOTAPH_CI"


@pytest.fixture
def pg_dsn() -> str:
    """The shared server's address. Unset: skipped, except in CI (the backend exists, so CI
    must run it; the conformance suite's rule)."""
    dsn = os.environ.get(PG_DSN_ENV)
    if not dsn:
        if os.environ.get(CI_ENV):
            pytest.fail(f"{CI_ENV} is set but {PG_DSN_ENV} is not: CI must run the PostgreSQL backend")
        pytest.skip(f"{PG_DSN_ENV} is not set (e.g. postgresql://postgres@127.0.0.1:5432/test)")
    return dsn


def drop_schema(dsn: str, schema: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def fresh_schema() -> str:
    """A schema name no store uses yet (every test schema's prefix is ``t_``)."""
    return f"t_{uuid.uuid4().hex[:12]}"


def schema_url(dsn: str, schema: str) -> str:
    """``dsn`` naming the store's schema, as a user passes it to ``cenotaph.open``."""
    return f"{dsn}{'&' if '?' in dsn else '?'}schema={schema}"


@pytest.fixture
def pg_schema(pg_dsn: str) -> Iterator[str]:
    """A schema name no store uses yet; dropped (with everything in it) after the test."""
    schema = fresh_schema()
    try:
        yield schema
    finally:
        drop_schema(pg_dsn, schema)


@pytest.fixture
def schemas(pg_dsn: str) -> Iterator[Callable[[], str]]:
    """Fresh schema names, as many as the test asks for, each dropped (if anything made it)
    after the test."""
    made: list[str] = []

    def make() -> str:
        made.append(fresh_schema())
        return made[-1]

    try:
        yield make
    finally:
        for schema in made:
            drop_schema(pg_dsn, schema)


@pytest.fixture
def open_backend(pg_dsn: str, pg_schema: str) -> Iterator[Callable[[], PostgresBackend]]:
    """Opens backends on the test's schema (each call another, like another process's); all
    are closed at teardown."""
    opened: list[PostgresBackend] = []

    def make() -> PostgresBackend:
        backend = open_postgres(pg_dsn, schema=pg_schema)
        opened.append(backend)
        return backend

    try:
        yield make
    finally:
        for backend in opened:
            backend.close()


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    """A throwaway primary and streaming replica, stopped and removed after the test."""
    try:
        made = Cluster.create()
    except ClusterUnavailable as exc:
        pytest.skip(f"no throwaway PostgreSQL cluster here: {exc}")
    try:
        yield made
    finally:
        made.destroy()
