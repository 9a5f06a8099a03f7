"""``cenotaph kg import`` / ``kg export`` of the reference server's memory.jsonl, round trip.

The reference's JSONL cases (``file persistence`` in its test suite: one JSON object per line,
entities then relations, a ``type`` field in the file and none in what the tools return) are
checked here against files in its exact format.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from mcp import Client
from tests.mcp.mcp_kit import CENOTAPH, USER, stdio_params

from cenotaph.service.mcp.graph import Entity, Relation
from cenotaph.service.mcp.jsonl import dump_graph, parse_graph

# exactly as the reference's saveGraph writes it: JSON.stringify per line, joined by "\n"
REFERENCE_FILE = "\n".join(
    [
        '{"type":"entity","name":"Alice","entityType":"person","observations":["works at Acme Corp","likes coffee"]}',
        '{"type":"entity","name":"Acme Corp","entityType":"company","observations":[]}',
        '{"type":"entity","name":"Zoë","entityType":"person","observations":["ünïcödé stays as is","quotes \\" and \\\\ too"]}',
        '{"type":"relation","from":"Alice","to":"Acme Corp","relationType":"works_at"}',
        '{"type":"relation","from":"Zoë","to":"Alice","relationType":"knows"}',
    ]
)


def run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([CENOTAPH, *args], input=stdin, capture_output=True, text=True, timeout=120)


def test_parse_and_dump_are_inverse_on_the_reference_format() -> None:
    entities, relations = parse_graph(REFERENCE_FILE + "\n\n")
    assert entities[0] == Entity("Alice", "person", ("works at Acme Corp", "likes coffee"))
    assert relations[1] == Relation("Zoë", "Alice", "knows")
    assert dump_graph(entities, relations) == REFERENCE_FILE
    lines = REFERENCE_FILE.split("\n")
    assert [json.loads(line)["type"] for line in lines] == ["entity"] * 3 + ["relation"] * 2


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ('{"type":"entity","name":"A","entityType":"p","observations":[]}\nnot json', 2),
        ('{"type":"entity","name":1,"entityType":"p","observations":[]}', 1),
        ('\n\n{"type":"relation","from":"A","to":"B"}', 3),
        ('{"type":"entity","name":"A","entityType":"p","observations":"x"}', 1),
    ],
)
def test_a_bad_line_is_named(text: str, line: int) -> None:
    with pytest.raises(ValueError, match=f"line {line}"):
        parse_graph(text)


def test_unknown_types_and_blank_lines_are_skipped_as_the_reference_does() -> None:
    text = '{"type":"comment","text":"x"}\n\n   \n{"type":"entity","name":"A","entityType":"p","observations":[]}'
    assert parse_graph(text) == ([Entity("A", "p")], [])


def test_cli_import_then_export_is_the_same_file(cli_data: Path, tmp_path: Path) -> None:
    source = tmp_path / "memory.jsonl"
    source.write_text(REFERENCE_FILE, encoding="utf-8")
    imported = run("kg", "import", str(source), "--prefix", USER, "--data", str(cli_data))
    assert imported.returncode == 0, imported.stderr
    assert json.loads(imported.stdout) == {
        "entities": {"read": 3, "created": 3},
        "relations": {"read": 2, "created": 2},
    }
    again = run("kg", "import", "-", "--prefix", USER, "--data", str(cli_data), stdin=REFERENCE_FILE)
    assert json.loads(again.stdout)["entities"]["created"] == 0  # idempotent
    exported = run("kg", "export", "--prefix", USER, "--data", str(cli_data))
    assert exported.returncode == 0 and exported.stdout == REFERENCE_FILE
    out = tmp_path / "out.jsonl"
    assert run("kg", "export", str(out), "--prefix", USER, "--data", str(cli_data)).returncode == 0
    assert out.read_text(encoding="utf-8") == REFERENCE_FILE
    other = run("kg", "export", "--prefix", "tenant:acme/user:bob", "--data", str(cli_data))
    assert other.stdout == ""  # another prefix holds another (empty) graph


@pytest.mark.anyio
async def test_an_imported_graph_is_served_by_the_knowledge_graph_profile(
    cli_data: Path, tmp_path: Path
) -> None:
    source = tmp_path / "memory.jsonl"
    source.write_text(REFERENCE_FILE, encoding="utf-8")
    assert run("kg", "import", str(source), "--prefix", USER, "--data", str(cli_data)).returncode == 0
    params = stdio_params(cli_data, "--profile", "knowledge-graph", "--prefix", USER)
    async with Client(params) as client:
        result = await client.call_tool("read_graph", {})
    entities, relations = parse_graph(REFERENCE_FILE)
    assert result.structured_content == {
        "entities": [e.to_json() for e in entities],
        "relations": [r.to_json() for r in relations],
    }


def test_cli_bad_input_is_one_line_and_imports_nothing(cli_data: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text(REFERENCE_FILE + "\n{oops", encoding="utf-8")
    failed = run("kg", "import", str(bad), "--prefix", USER, "--data", str(cli_data))
    assert (
        failed.returncode == 2 and "line 6" in failed.stderr and len(failed.stderr.strip().splitlines()) == 1
    )
    assert run("kg", "export", "--prefix", USER, "--data", str(cli_data)).stdout == ""
    binary = tmp_path / "binary.jsonl"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    assert run("kg", "import", str(binary), "--prefix", USER, "--data", str(cli_data)).returncode == 2
    missing = run("kg", "import", str(tmp_path / "nope.jsonl"), "--prefix", USER, "--data", str(cli_data))
    assert missing.returncode == 2 and "Traceback" not in missing.stderr
    assert run("kg", "import", str(bad), "--prefix", "not a scope", "--data", str(cli_data)).returncode == 2
    assert run("kg", "export", "--prefix", USER, "--data", str(tmp_path / "no-store")).returncode == 2
