"""Search quality rules: what is embedded for a record (its key, metadata and value) and the relevance floor
(hits at or below the embedder's min_score are noise and never returned, nor asked about)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import cast

import numpy as np
import numpy.typing as npt
import pytest

import cenotaph
from cenotaph.errors import InvalidValueError
from cenotaph.index.embedder import (
    DEFAULT_MIN_SCORE,
    HASHING_MIN_SCORE,
    CallableEmbedder,
    HashingEmbedder,
    memory_text,
    min_score,
)
from cenotaph.index.vectors import VectorIndex

USER = "tenant:acme/user:alice"
MEMORIES = {
    "cardio": "Cardiology appointment with Dr Heart on Tuesday",
    "groceries": "Buy milk, eggs and bread at the grocery store",
    "car": "The car needs new tyres before winter",
    "holiday": "Flights to Lisbon are booked for the second week of May",
}


def _ids(hits: list[cenotaph.SearchHit]) -> list[str]:
    return [h.record.key for h in hits]


def test_memory_text_is_key_metadata_and_value() -> None:
    assert memory_text("gym_schedule", "Mondays at 7pm", {"topic": "fitness"}) == (
        "gym schedule\ntopic fitness\nMondays at 7pm"
    )
    assert memory_text("favoriteFood", {"dish": "curry"}) == "favorite Food\ndish curry"
    assert memory_text("", "only a value", {}) == "only a value"
    assert memory_text("a-b.c/d:e", None) == "a b c d e"


def test_the_default_embedder_finds_a_memory_by_its_key_and_its_metadata(tmp_path: Path) -> None:
    store = cenotaph.open(tmp_path)
    gym = store.write(USER, "gym_schedule", "Mondays and Thursdays at 7pm")
    trip = store.write(USER, "flights", "Booked Tokyo for April", metadata={"topic": "travel"})
    store.write_many([{"scope": USER, "key": k, "value": v} for k, v in MEMORIES.items()])
    assert _ids(store.search(USER, "gym", k=1)) == [gym.key]  # only the key says "gym"
    assert _ids(store.search(USER, "travel plans", k=1)) == [trip.key]  # only the metadata says "travel"
    hashing = HashingEmbedder()
    value_only = hashing.embed(["Mondays and Thursdays at 7pm"])[0] @ hashing.embed(["gym"])[0]
    assert value_only <= HASHING_MIN_SCORE  # the value alone would not have been found
    store.close()


UNRELATED = (
    "quantum chromodynamics",
    "zebra",
    "photosynthesis in kelp forests",
    "medieval siege engines",
    "jazz",
)


def test_the_floor_removes_near_zero_noise(tmp_path: Path) -> None:
    """Queries that share no word with any memory: with the floor off every memory is a hit (hash collisions
    give each one some score); with it, no hit scores at or below it and most of the noise is gone."""
    store = cenotaph.open(tmp_path)
    store.write_many([{"scope": USER, "key": k, "value": v} for k, v in MEMORIES.items()])
    kept = [h.score for q in UNRELATED for h in store.search(USER, q)]
    hits = store.search(USER, "cardiology appointment")
    assert _ids(hits)[:1] == ["cardio"] and all(h.score > HASHING_MIN_SCORE for h in hits)
    store.close()
    noisy = cenotaph.open(tmp_path, embedder=HashingEmbedder(min_score=-1.0))
    everything = [h.score for q in UNRELATED for h in noisy.search(USER, q)]
    noisy.close()
    assert len(everything) == len(UNRELATED) * len(MEMORIES)
    assert all(score > HASHING_MIN_SCORE for score in kept)
    assert sorted(kept) == sorted(s for s in everything if s > HASHING_MIN_SCORE)
    assert len(kept) <= len(everything) // 2  # at least half of the noise was near zero
    assert any(abs(s) <= HASHING_MIN_SCORE for s in everything)


def test_the_floor_is_the_embedders_own_and_is_checked() -> None:
    assert min_score(HashingEmbedder()) == HASHING_MIN_SCORE
    assert min_score(HashingEmbedder(min_score=0.3)) == 0.3
    assert min_score(CallableEmbedder(lambda t: [[1.0]] * len(t), dim=1)) == DEFAULT_MIN_SCORE

    class Bare:  # an embedder with no opinion gets the default floor
        dim = 2

        def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
            return np.ones((len(texts), 2), dtype=np.float32)

    assert min_score(Bare()) == DEFAULT_MIN_SCORE
    for bad in (1.0, -1.5, float("nan"), True, "0.1"):
        with pytest.raises(InvalidValueError):
            HashingEmbedder(min_score=bad)  # type: ignore[arg-type]
        with pytest.raises(InvalidValueError):
            CallableEmbedder(lambda t: [[1.0]] * len(t), dim=1, min_score=bad)  # type: ignore[arg-type]


def test_the_index_stops_before_the_floor_and_never_asks_about_what_is_below() -> None:
    index = VectorIndex(dim=2)
    angles = {"a": 0.0, "b": 1.0, "c": 1.45, "d": 2.5}  # cosines with (1, 0): 1.0, 0.54, 0.12, -0.80
    index.add(list(angles), np.array([[np.cos(t), np.sin(t)] for t in angles.values()], dtype=np.float32))
    query = np.array([1.0, 0.0], dtype=np.float32)
    asked: list[str] = []

    def allow(id_: str) -> bool:
        asked.append(id_)
        return id_ != "a"

    hits = index.search(query, k=4, allow=allow, min_score=0.2)
    assert [h for h, _ in hits] == ["b"]
    assert asked == ["a", "b"]  # c (0.12) and d are below the floor: never rechecked
    everything = index.search(query, k=4)
    assert [h for h, _ in everything] == ["a", "b", "c", "d"]  # no floor: everything
    c_score = everything[2][1]
    assert [h for h, _ in index.search(query, k=4, min_score=c_score)] == ["a", "b"]  # strictly above


def test_a_custom_embedders_floor_applies_in_the_store(tmp_path: Path) -> None:
    hashing = HashingEmbedder(dim=64, min_score=-1.0)

    def rows(texts: Sequence[str]) -> Sequence[Sequence[float]]:
        # an ndarray of rows, which CallableEmbedder takes (its annotation says sequences)
        return cast(Sequence[Sequence[float]], hashing.embed(list(texts)))

    strict = CallableEmbedder(rows, dim=64, min_score=0.5)
    store = cenotaph.open(tmp_path, embedder=strict)
    store.write_many([{"scope": USER, "key": k, "value": v} for k, v in MEMORIES.items()])
    hits = store.search(USER, "cardiology appointment with Dr Heart", k=4)
    assert _ids(hits) == ["cardio"] and hits[0].score > 0.5
    store.close()
