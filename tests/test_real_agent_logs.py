"""Real agent transcripts as their tools wrote them (tests/data/real-agents/SOURCE.md): Claude
Code 2.1.39 main sessions, 70 % `progress` lines, and a Codex 0.125 rollout. Each must be read
as its format, every line an event, its tool calls with their results and errors, its subagent
as its own actor, its usage once per response; a scan must judge it, and stay quiet on the
healthy ones. The answers are worked out here from the JSON itself, independently of the SQL
mappings."""

from __future__ import annotations

import gzip
import hashlib
import json
from pathlib import Path

import pytest
from agent_transcripts import ROOT, SERIOUS, rows, scan

from loophound import formats
from loophound.ingest import ingest
from loophound.store import Store

DATA = ROOT / "tests" / "data" / "real-agents"
LOOP = DATA / "ae4a77f8-aedd-4bc1-888f-c94edc91af04.jsonl.gz"
CACHED_1H = DATA / "258c7280-ae70-4798-800f-63464d01a85d.jsonl.gz"
PLAIN = DATA / "6adcf0da-e8ac-4760-8026-66fb75b5ee45.jsonl.gz"
SESSIONS = (LOOP, CACHED_1H, PLAIN)
ROLLOUT = DATA / "rollout-2026-05-11T13-28-45-019e1695-0522-7c83-8b39-0dd379793f80.jsonl.gz"
SHA256 = {  # of the decompressed files: the sources' (SOURCE.md)
    LOOP: "099bffa9cbfee4eb43713a56bc9e53de46435729a1c185c14ad5cd2169f8700d",
    CACHED_1H: "a98f838510e41961a74c1d9a8f4bea2ec34e692fc885ecc1e1c2501dc65ed33e",
    PLAIN: "3d8082c090495f6d20c2cc1f5406072ed53c30c6cc9ce4bfac448897e922c210",
    ROLLOUT: "fc0475d630a4ccb9fc706444ef09f2fc77b3b1219e527ca07b734efea49243b7",
}
# the commit the pre-commit hook rejects, 7 times (the loop the set's readers labelled)
REJECTED_COMMITS = [1204, 1338, 1361, 1384, 1414, 1442, 1458]


def records(path: Path) -> list[dict]:
    return [json.loads(line) for line in gzip.decompress(path.read_bytes()).splitlines()]


def unwrapped(record: dict) -> dict:
    """The line itself, or the subagent's line an `agent_progress` line relays."""
    data = record.get("data")
    if record.get("type") == "progress" and isinstance(data, dict) \
            and data.get("type") == "agent_progress":
        return data["message"]
    return record


def usage_once_per_response(path: Path) -> tuple[int, int, int, int, int]:
    """(input, output, cache read, cache write, responses): each response (message id) once,
    its output the largest count of its lines (it grows as the response streams)."""
    seen: dict[str, list[int]] = {}
    for r in map(unwrapped, records(path)):
        message = r.get("message")
        if r.get("type") != "assistant" or not isinstance(message, dict) or not message.get("usage"):
            continue
        u = message["usage"]
        got = [u["input_tokens"], u["output_tokens"], u["cache_read_input_tokens"],
               u["cache_creation_input_tokens"]]
        if message["id"] in seen:
            seen[message["id"]][1] = max(seen[message["id"]][1], got[1])
        else:
            seen[message["id"]] = got
    return (*(sum(v[i] for v in seen.values()) for i in range(4)), len(seen))


@pytest.fixture(scope="module")
def read(tmp_path_factory) -> tuple[Store, dict[str, list[str]]]:
    """The store of the five files, and each file's ingest warnings."""
    st = Store(tmp_path_factory.mktemp("real") / "st")
    report = ingest([str(p) for p in (*SESSIONS, ROLLOUT)], st)
    assert {f.status for f in report.files} == {"new"}
    return st, {f.path: f.warnings for f in report.files}


@pytest.fixture(scope="module")
def store(read) -> Store:
    return read[0]


def test_the_copies_are_the_sources():
    for path, digest in SHA256.items():
        assert hashlib.sha256(gzip.decompress(path.read_bytes())).hexdigest() == digest


def test_recognised_by_their_first_lines():
    for path in SESSIONS:
        head = gzip.decompress(path.read_bytes())[:65536]
        assert formats.sniff(head, Path(path.stem)).name == "claude-code", path.name
        progress = [r for r in formats.sample_records(head) if r.get("type") == "progress"]
        assert len(progress) > 25  # what made them `generic` before: most lines are progress
    head = gzip.decompress(ROLLOUT.read_bytes())[:65536]
    assert formats.sniff(head, Path(ROLLOUT.stem)).name == "codex"


def test_every_line_is_one_event_and_no_type_is_unknown(read):
    store, warnings = read
    for path in (*SESSIONS, ROLLOUT):
        n = len(records(path))
        assert rows(store, "SELECT count(*), count(DISTINCT line), min(line), max(line) "
                           "FROM events WHERE file = ?", [str(path)]) == [(n, n, 1, n)]
        assert not [w for w in warnings[str(path)] if "does not know" in w], path.name
    assert rows(store, "SELECT count(*) FROM quarantine") == [(0,)]
    assert dict(rows(store, "SELECT file, any_value(format) FROM events GROUP BY file")) == {
        **{str(p): "claude-code" for p in SESSIONS}, str(ROLLOUT): "codex"}


def test_progress_lines_are_records_of_the_main_agent(store):
    for path in SESSIONS:
        want: dict[str, int] = {}
        for r in records(path):
            if r["type"] == "progress" and r["data"]["type"] != "agent_progress":
                want[r["data"]["type"]] = want.get(r["data"]["type"], 0) + 1
        got = dict(rows(store, """SELECT extra->>'progress', count(*) FROM events
                                  WHERE file = ? AND event_type = 'progress'
                                    AND kind = 'record' AND actor = 'claude' AND action IS NULL
                                  GROUP BY ALL""", [str(path)]))
        assert got == want and want.get("hook_progress", 0) > 500


def test_usage_is_counted_once_per_response_subagents_included(store):
    for path in SESSIONS:
        got = rows(store, """SELECT sum(tokens_in), sum(tokens_out), sum(tokens_cache_read),
                                    sum(tokens_cache_write), count(tokens_in)
                             FROM events WHERE file = ?""", [str(path)])[0]
        assert got == usage_once_per_response(path), path.name
    # every response that states a model is priced by it; the subagent ran on another model
    assert rows(store, "SELECT DISTINCT actor, model FROM events WHERE file = ? AND tokens_in "
                       "IS NOT NULL ORDER BY ALL", [str(CACHED_1H)]) == [
        ("agent-a881341", "claude-sonnet-4-5-20250929"), ("claude", "claude-opus-4-6")]


def test_the_subagent_relayed_in_progress_lines_is_its_own_actor(store):
    f = str(LOOP)
    calls = rows(store, """SELECT count(*), count(ok), count(*) FILTER (WHERE ok),
                                  list(DISTINCT extra->>'spawned_by'), list(DISTINCT session)
                           FROM events WHERE file = ? AND actor = 'agent-aac57f5'
                             AND kind = 'tool_call'""", [f])
    assert calls == [(12, 12, 12, ["toolu_01Hf8v1Za7y4af8VUwSR4CXU"],
                      ["ae4a77f8-aedd-4bc1-888f-c94edc91af04"])]
    # the Task call that started it, and its result naming the subagent
    assert rows(store, """SELECT c.line, c.action, c.args::JSON->>'subagent_type', r.line,
                                 r.extra->>'spawned'
                          FROM events c JOIN events r ON r.answers = c.event_id
                          WHERE c.file = ? AND c.corr_id = 'toolu_01Hf8v1Za7y4af8VUwSR4CXU'""",
                [f]) == [(71, "Task", "general-purpose", 99, "aac57f5")]
    # its prompt came from the main agent
    assert rows(store, "SELECT line, actor, target FROM events WHERE file = ? AND line = 72",
                [f]) == [(72, "claude", "agent-aac57f5")]


def test_the_hook_rejections_are_failed_calls(store):
    got = rows(store, """SELECT line, action, ok, error, args::JSON->>'command' FROM events
                         WHERE file = ? AND kind = 'tool_call' AND line BETWEEN 1204 AND 1463
                           AND NOT ok AND action = 'Bash' ORDER BY line""", [str(LOOP)])
    assert [g[0] for g in got] == REJECTED_COMMITS
    assert all(g[3].startswith("Pre-commit validation failed:") for g in got)
    assert all(g[4].startswith("git add -A && git commit") for g in got)
    # the text names the checker that failed: CREDO twice, DIALYZER five times
    assert sorted(sum(c in g[3] for g in got) for c in ("[CREDO]", "[DIALYZER]")) == [2, 5]


def test_codex_calls_carry_their_exit_codes(store):
    outputs = [r["payload"] for r in records(ROLLOUT) if r["payload"].get("type") ==
               "function_call_output"]
    exited = sum("Process exited with code" in str(p.get("output")) for p in outputs)
    failed = sum("Process exited with code" in str(p.get("output"))
                 and "Process exited with code 0" not in str(p.get("output")) for p in outputs)
    got = rows(store, "SELECT count(*), count(ok), count(*) FILTER (WHERE NOT ok) FROM events "
                      "WHERE file = ? AND kind = 'tool_call'", [str(ROLLOUT)])
    assert got == [(len(outputs), exited, failed)] and failed >= 1


@pytest.mark.parametrize("path", [CACHED_1H, PLAIN], ids=["258c7280", "6adcf0da"])
def test_the_healthy_sessions_are_judged_and_quiet(path, tmp_path):
    plain = tmp_path / path.stem  # as the set holds them: not compressed
    plain.write_bytes(gzip.decompress(path.read_bytes()))
    doc, _ = scan(plain, tmp_path)
    assert doc["coverage"]["verdict"] in ("clean", "findings")
    assert not [f for f in doc["findings"] if f["severity"] in SERIOUS]


def test_a_line_of_a_type_not_known_yet_is_read_and_named(tmp_path):
    """A later release's new record type: the file is still a transcript, the line a record
    with its fields in `extra`, and the ingest summary names the type and its count."""
    lines = records(PLAIN)[:40]
    novel = {k: v for k, v in lines[5].items() if k not in ("data", "message")}
    lines[5:6] = [{**novel, "type": "mcp-notice", "server": "docs"}] * 2
    path = tmp_path / "s.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in lines))
    st = Store(tmp_path / "st")
    report = ingest([str(path)], st)
    assert report.files[0].format == "claude-code"
    assert [w for w in report.files[0].warnings if "line types" in w] == [
        "line types the claude-code format does not know: mcp-notice (2); read as `record` "
        "events, the fields no column holds kept in `extra`"]
    got = rows(st, "SELECT line, kind, actor, extra::JSON->>'server' FROM events "
                   "WHERE event_type = 'mcp-notice' ORDER BY line")
    assert got == [(6, "record", "claude", "docs"), (7, "record", "claude", "docs")]
    assert rows(st, "SELECT count(*) FROM events") == [(41,)]


def test_a_compaction_summary_is_not_the_user_speaking(store):
    """Claude Code writes the summary of a compacted conversation as a `user` line: a record,
    not a message of the user's."""
    lines = [n for n, r in enumerate(records(CACHED_1H), 1) if r.get("isCompactSummary")]
    assert len(lines) == 1
    assert rows(store, "SELECT kind, actor FROM events WHERE file = ? AND line = ?",
                [str(CACHED_1H), lines[0]]) == [("record", "claude")]
