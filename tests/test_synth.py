"""The synthetic logs: reproducible, byte-exact to each format's serializer, and their answer
keys agree with what the files actually contain (counted here with plain `json`)."""

from __future__ import annotations

import datetime as dt
import json
import shutil
from collections import Counter
from itertools import islice
from pathlib import Path

import numpy as np
import pytest

from loophound.synth import bproxy as bp
from loophound.synth import write_clean_twins, write_full_incident, write_samples

MB = 1_000_000


@pytest.fixture(scope="module")
def samples(tmp_path_factory) -> tuple[Path, dict]:
    root = tmp_path_factory.mktemp("samples")
    return root, write_samples(root, seed=7)


@pytest.fixture(scope="module")
def twins(tmp_path_factory) -> tuple[Path, dict]:
    root = tmp_path_factory.mktemp("twins")
    return root, write_clean_twins(root, seed=7)


def read(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def section(tree: tuple[Path, dict], name: str) -> tuple[Path, dict]:
    root, expected = tree
    return root / name, expected["sections"][name]


def log_files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file() and p.name != "results.json"
                  and p.name != "EXPECTED.json")


def documents(root: Path, expected: dict) -> set[Path]:
    """The files that are one JSON document each (trajectories: the sections with `records`)."""
    return {root / sec["dir"] / rel for sec in expected["sections"].values()
            for rel in sec.get("records", {})}


def tree_bytes(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file()}


# --- the whole tree ------------------------------------------------------------------------


def test_same_seed_same_bytes(samples, tmp_path):
    root, _ = samples
    write_samples(tmp_path, seed=7)
    assert tree_bytes(tmp_path) == tree_bytes(root)


def test_other_seed_other_bytes(samples, tmp_path):
    write_samples(tmp_path, seed=8)
    assert tree_bytes(tmp_path)["hooks/hooks.jsonl"] != tree_bytes(samples[0])["hooks/hooks.jsonl"]


def test_twins_are_reproducible(twins, tmp_path):
    write_clean_twins(tmp_path, seed=7)
    assert tree_bytes(tmp_path) == tree_bytes(twins[0])


@pytest.mark.parametrize("tree", ["samples", "twins"])
def test_every_line_is_a_json_object_and_files_end_with_newline(tree, request):
    root, expected = request.getfixturevalue(tree)
    files = [p for p in log_files(root) if p not in documents(root, expected)]
    assert len(files) >= 10
    for path in files:
        raw = path.read_bytes()
        assert raw.endswith(b"\n"), path
        assert b"\r" not in raw
        assert all(isinstance(json.loads(line), dict) for line in raw.splitlines()), path
    for path in (root / "EXPECTED.json", root / "labtrust" / "results.json"):
        assert path.read_bytes().endswith(b"\n")
        assert isinstance(json.loads(path.read_text()), dict)


@pytest.mark.parametrize("tree", ["samples", "twins"])
def test_files_are_under_one_megabyte(tree, request):
    root, _ = request.getfixturevalue(tree)
    assert all(p.stat().st_size < MB for p in root.rglob("*") if p.is_file())


@pytest.mark.parametrize("tree", ["samples", "twins"])
def test_line_counts_in_answer_key_match_files(tree, request):
    root, expected = request.getfixturevalue(tree)
    listed = set()
    for sec in expected["sections"].values():
        for rel, n in sec["lines"].items():
            path = root / sec["dir"] / rel
            listed.add(path)
            assert len(path.read_text(encoding="utf-8").splitlines()) == n, path
    assert listed == set(log_files(root))
    assert json.loads((root / "EXPECTED.json").read_text()) == expected


SERIALIZERS = {
    "bproxy": lambda r: json.dumps(r, separators=(",", ":"), ensure_ascii=False),
    "sven": lambda r: json.dumps(r, separators=(",", ":"), ensure_ascii=False),
    "labtrust": lambda r: json.dumps(r, sort_keys=True),
    "hooks": json.dumps,
    # JSON.stringify (Claude Code) and serde_json (Codex): compact, non-ASCII as is
    "claude-code": lambda r: json.dumps(r, separators=(",", ":"), ensure_ascii=False),
    "codex": lambda r: json.dumps(r, separators=(",", ":"), ensure_ascii=False),
    # the Collector's file exporter (pdata's JSON): compact, non-ASCII as is
    "otlp": lambda r: json.dumps(r, separators=(",", ":"), ensure_ascii=False),
}


def test_lines_are_byte_exact_for_their_format(samples):
    root, expected = samples
    for sec in expected["sections"].values():
        if "records" in sec:
            continue  # documents, not lines: see below
        dump = SERIALIZERS[sec["format"]]
        for rel in sec["lines"]:
            for line in (root / sec["dir"] / rel).read_text(encoding="utf-8").splitlines():
                assert dump(json.loads(line)) == line


@pytest.mark.parametrize("tree", ["samples", "twins"])
def test_documents_are_what_the_agents_write(tree, request):
    """A trajectory is one JSON document, `json.dumps(..., indent=2)` with no newline at the
    end, as SWE-agent, mini-swe-agent and OpenHands save it; its steps are as counted."""
    root, expected = request.getfixturevalue(tree)
    sec = expected["sections"]["trajectory"]
    assert len(sec["records"]) >= 4 and set(sec["records"]) == set(sec["lines"])
    for rel, n in sec["records"].items():
        text = (root / sec["dir"] / rel).read_text(encoding="utf-8")
        doc = json.loads(text)
        assert json.dumps(doc, indent=2) == text, rel
        steps = doc if isinstance(doc, list) else doc.get("trajectory") or doc["messages"]
        assert len(steps) == n and all(isinstance(s, dict) for s in steps), rel


# --- bproxy --------------------------------------------------------------------------------


def storm_lines(records: list[dict]) -> list[int]:
    """0-based indexes of the storm's received and response lines."""
    out = []
    for i, r in enumerate(records):
        after = r["time"] >= bp.STORM_START_MS
        if after and r.get("action") == "scroll" and r.get("session") == bp.SESSION:
            out.append(i)
        elif r.get("error_code") == "SESSION_NOT_FOUND":
            out.append(i)
    return out


def test_bproxy_storm_matches_answer_key(samples):
    d, sec = section(samples, "bproxy")
    records = read(d / sec["file"])
    storm = next(i for i in sec["incidents"] if i["kind"] == "dead_session_retry")
    idx = storm_lines(records)
    received = [records[i] for i in idx if records[i]["event"] == "received"]
    responses = [records[i] for i in idx if records[i]["event"] == "response"]
    assert len(received) == len(responses) == storm["requests"] == 1200
    assert {f"{r['pid']}:{r['ownerHash']}" for r in received + responses} == {storm["actor"]}
    assert {r["id"] for r in received} == {r["id"] for r in responses}
    assert all(r["ok"] is False and r["elapsed_ms"] == 0 for r in responses)
    assert (storm["first_line"], storm["last_line"]) == (idx[0] + 1, idx[-1] + 1)
    assert received[0]["time"] == bp.STORM_START_MS
    assert storm["start"] == "2026-06-18T23:42:21.514Z"
    gaps = np.diff([r["time"] for r in received])
    assert 95 <= gaps.min() and gaps.max() <= 110
    close = records[storm["close_line"] - 1]
    assert close["action"] == "session.close" and close["time"] == bp.CLOSE_MS
    ids = {r["id"] for r in received}
    assert not any(r["id"] in ids for r in records if r["event"] in ("error_delay", "pacing_wait"))


def test_bproxy_key_order_and_omitted_keys(samples):
    d, sec = section(samples, "bproxy")
    records = read(d / sec["file"])
    head = ["level", "time", "pid", "hostname"]
    shapes = {r["event"]: list(r) for r in records}
    assert shapes["received"] == head + ["id", "action", "session", "destructive", "event",
                                         "ownerHash"]
    assert shapes["response"][:4] == head
    assert [k for k in list(shapes["response"])[4:] if k != "error_code"] == [
        "id", "event", "ok", "elapsed_ms", "ownerHash"]
    assert shapes["forwarded"] == head + ["id", "event", "ws_client", "tab"]
    assert shapes["pacing_config"] == head + ["event", "session", "mode", "ownerHash"]
    assert all("error_code" not in r for r in records if r.get("ok") is True)
    assert any("session" not in r for r in records if r["event"] == "received")  # tab.open
    events = Counter(r["event"] for r in records)
    for event in ("pacing_wait", "error_delay", "timeout", "ws_connect", "ws_disconnect"):
        assert events[event] > 0, event


def test_bproxy_ordinary_errors_and_backoff_are_not_loops(samples):
    d, sec = section(samples, "bproxy")
    records = read(d / sec["file"])
    codes = Counter(r.get("error_code") for r in records if r["event"] == "response")
    assert codes["ELEMENT_NOT_FOUND"] > 0 and codes["NO_EXTENSION"] > 0
    backoff = next(h for h in sec["healthy"] if h["kind"] == "backoff_retry")
    gaps = backoff["gaps_ms"]
    assert len(gaps) == backoff["failed_attempts"] >= 4
    assert all(1.8 < b / a < 2.2 for a, b in zip(gaps, gaps[1:], strict=False))
    assert not backoff["loop"]


def test_bproxy_twin_is_the_background_line_for_line(samples, twins):
    d, sec = section(samples, "bproxy")
    incident = (d / sec["file"]).read_text().splitlines()
    records = [json.loads(line) for line in incident]
    storm = set(storm_lines(records))
    # the agents stuck after the storm are the incident's too: their owners' lines, and the
    # lines of their requests that name no owner
    owners = {i["actor"].split(":")[1] for i in sec["incidents"] if i["kind"] != "dead_session_retry"}
    ids = {r["id"] for r in records if r.get("ownerHash") in owners and "id" in r}
    stuck = {i for i, r in enumerate(records) if r.get("ownerHash") in owners or r.get("id") in ids}
    background = [line for i, line in enumerate(incident) if i not in storm | stuck]
    td, tsec = section(twins, "bproxy")
    assert (td / tsec["file"]).read_text().splitlines() == background
    assert tsec["incidents"] == []


def test_bproxy_trimmed_form_is_the_seed_excerpt_shape(samples):
    d, sec = section(samples, "bproxy-trimmed")
    records = read(d / sec["file"])
    assert not any({"level", "pid", "hostname", "id", "ownerHash"} & set(r) for r in records)
    (storm,) = sec["incidents"]
    first = records[storm["first_line"] - 1: storm["first_line"] + 1]
    assert first == [
        {"time": 1781826141514, "action": "scroll", "session": "6afr3v", "event": "received"},
        {"time": first[1]["time"], "event": "response", "ok": False, "elapsed_ms": 0,
         "error_code": "SESSION_NOT_FOUND"}]
    assert storm["actor"] is None and storm["requests"] == 1200
    assert records[storm["close_line"] - 1]["action"] == "session.close"


def test_full_size_rows_equal_json_dumps(tmp_path):
    """The vectorised writer must produce exactly what the daemon would: check it small."""
    gen = np.random.default_rng(3)
    recv = bp.STORM_START_MS + np.arange(0, 5000, 101, dtype=np.int64)
    resp = recv + (np.arange(len(recv)) % 2)
    healthy = [(0, b'{"a":1}\n'), (7, b'{"b":2}\n'), (len(recv), b'{"c":3}\n')]
    path = tmp_path / "storm.log"
    with open(path, "wb") as fh:
        bp._write_storm(fh, gen, recv, resp, bp._storm_pair_template(4321, "a3f7c012"), healthy)
    lines = path.read_text().splitlines()
    assert lines[0] == '{"a":1}' and lines[15] == '{"b":2}' and lines[-1] == '{"c":3}'
    storm = [json.loads(x) for x in lines if x.startswith('{"level"')]
    assert len(storm) == 2 * len(recv)
    for r, s, t0, t1 in zip(storm[::2], storm[1::2], recv, resp, strict=True):
        assert r == {"level": 30, "time": int(t0), "pid": 4321, "hostname": bp.FULL_HOSTNAME,
                     "id": r["id"], "action": "scroll", "session": "6afr3v",
                     "destructive": True, "event": "received", "ownerHash": "a3f7c012"}
        assert s == {"level": 30, "time": int(t1), "pid": 4321, "hostname": bp.FULL_HOSTNAME,
                     "id": r["id"], "event": "response", "ok": False, "elapsed_ms": 0,
                     "error_code": "SESSION_NOT_FOUND", "ownerHash": "a3f7c012"}
        assert r["id"][14] == "4" and r["id"][19] in "89ab"
    assert all(json.dumps(json.loads(x), separators=(",", ":")) == x for x in lines)
    assert len({r["id"] for r in storm}) == len(recv)


@pytest.mark.skipif(shutil.disk_usage("/tmp").free < 2_000_000_000, reason="needs 2 GB free")
def test_full_incident_size_lines_and_answer_key(tmp_path):
    path = tmp_path / "2026-06-18.log"
    truth = write_full_incident(path, seed=1)
    (storm,) = truth["incidents"]
    raw = path.read_bytes()
    n = raw.count(b"\n")
    assert raw.endswith(b"\n") and n == truth["lines"][path.name] == len(raw.splitlines())
    assert 1_200_000 <= n <= 1_230_000
    assert 230 * 2**20 <= len(raw) == truth["bytes"] <= 245 * 2**20
    assert storm["requests"] == 608_970 and storm["lines"] == 2 * 608_970
    assert (storm["start"], storm["end"]) == ("2026-06-18T23:42:21.514Z",
                                              "2026-06-19T16:51:16.856Z")
    del raw
    with open(path, "rb") as fh:
        head = [json.loads(x) for x in islice(fh, storm["first_line"] + 1)]
    assert head[storm["close_line"] - 1]["action"] == "session.close"
    assert head[-2]["time"] == bp.STORM_START_MS and head[-1]["error_code"] == "SESSION_NOT_FOUND"


# --- sven ----------------------------------------------------------------------------------


def test_sven_echo_loop(samples):
    d, sec = section(samples, "sven")
    echo = next(i for i in sec["incidents"] if i["kind"] == "p2p_echo")
    a_side, b_side = (read(d / f) for f in echo["files"])
    assert len(a_side) == len(b_side) == echo["messages"] == 400
    assert [r["message_id"] for r in a_side] == [r["message_id"] for r in b_side]
    assert {r["role"] for r in a_side[1:]} == {"assistant"} and {r["depth"] for r in a_side} == {1}
    assert all(x["direction"] != y["direction"] for x, y in zip(a_side, a_side[1:], strict=False))
    assert [r["seq"] for r in a_side] == list(range(400))
    assert (a_side[0]["timestamp"], a_side[-1]["timestamp"]) == (echo["start"], echo["end"])


def test_sven_guarded_pingpong_and_room_flood(samples):
    d, sec = section(samples, "sven")
    guard = next(i for i in sec["incidents"] if i["kind"] == "echo_guarded")
    recs = read(d / guard["file"])
    assert len(recs) == guard["messages"] and {r["role"] for r in recs} == {"user"}
    for line in guard["guard_lines"]:
        assert recs[line - 1]["depth"] == 4 and recs[line - 1]["direction"] == "inbound"
    flood = next(i for i in sec["incidents"] if i["kind"] == "room_flood")
    posts = read(d / flood["file"])
    bots = [p for p in posts if p["sender_name"] in flood["sender_names"] and p.get("depth") == 1]
    assert len(bots) == flood["posts"]
    assert [p["sender_name"] for p in bots[:4]] == flood["sender_names"] * 2
    assert posts[flood["last_line"] - 1]["timestamp"] == flood["end"]


def test_sven_store_details(samples):
    d, sec = section(samples, "sven")
    martin = next(h for h in sec["healthy"] if h.get("image_line"))
    recs = read(d / martin["file"])
    image = recs[martin["image_line"] - 1]["content"][1]
    assert image["type"] == "image" and all(isinstance(b, int) for b in image["data"])
    assert sum("depth" not in r for r in recs) == martin["records_without_depth"]
    for rel in sec["lines"]:
        recs = read(d / rel)
        if "seq" in recs[0]:
            assert [r["seq"] for r in recs] == list(range(len(recs)))
            assert all(r["peer_id"] == Path(rel).stem for r in recs)
            assert list(recs[-1])[:6] == ["message_id", "seq", "timestamp", "direction",
                                          "peer_id", "role"]
        assert all(r["timestamp"].endswith("Z") for r in recs)


def test_sven_long_conversation_is_human_paced(samples):
    d, sec = section(samples, "sven")
    long = max((h for h in sec["healthy"] if h["kind"] == "conversation"),
               key=lambda h: h["messages"])
    recs = read(d / long["file"])
    assert len(recs) == long["messages"] >= 100
    assert [r["role"] for r in recs[:4]] == ["user", "assistant", "user", "assistant"]


# --- labtrust ------------------------------------------------------------------------------


def test_labtrust_repair_loop(samples):
    d, sec = section(samples, "labtrust")
    lines = read(d / sec["file"])
    loop, blocked = sec["incidents"]
    attempts = [r for r in lines if r.get("proposal_hash") == loop["proposal_hash"]]
    assert len(attempts) == loop["attempt_lines"] == loop["steps"] * 3
    assert all(r["validation_failed"] for r in attempts)
    assert max(r["attempt_index"] for r in attempts) == 1 + sec["max_repairs"]
    proposals = [r for r in lines if r.get("log_type") == "LLM_COORD_PROPOSAL"
                 and loop["first_step"] <= r["step_id"] <= loop["last_step"]]
    tokens = [r["meta"]["tokens_in"] for r in proposals]
    assert tokens == sorted(tokens) and sum(tokens) == loop["tokens_in"]
    runs = [r for r in lines if r.get("agent_id") == "A_RUNNER_0" and r["status"] == "BLOCKED"]
    assert len(runs) == blocked["count"] == 14
    assert {(r["action_type"], r["blocked_reason_code"]) for r in runs} == {
        ("START_RUN", "RC_REAGENT_STOCKOUT")}
    t = [r["t_s"] for r in runs]
    assert t == list(range(t[0], t[-1] + 10, 10)) == list(range(blocked["first_t_s"],
                                                                 blocked["last_t_s"] + 10, 10))
    assert lines[-1]["log_type"] == "LLM_COORD_AUDIT_DIGEST"


def test_labtrust_cost_and_results(samples):
    d, sec = section(samples, "labtrust")
    metas = [r["meta"] for r in read(d / sec["file"]) if r.get("log_type") == "LLM_COORD_PROPOSAL"]
    priced = [m["estimated_cost_usd"] for m in metas if m["estimated_cost_usd"] is not None]
    assert round(sum(priced), 6) == sec["cost"]["estimated_cost_usd"]
    assert {m["model_id"] for m in metas if m["estimated_cost_usd"] is None} == {"llama3.1:8b"}
    results = json.loads((d / "results.json").read_text())
    assert results["schema_version"] == "0.2"
    comm = results["episodes"][0]["metrics"]["coordination"]["comm"]
    assert set(comm) == {"msg_count", "drop_rate", "invalid_sig_count", "replay_drop_count",
                         "invalid_msg_rate", "spoof_attempt_count", "dropped_count",
                         "p95_latency_ms"}


def test_labtrust_twin_repairs_succeed(twins):
    d, sec = section(twins, "labtrust")
    lines = read(d / sec["file"])
    assert max(r.get("attempt_index", 0) for r in lines) <= 2
    blocked = [r for r in lines if r.get("status") == "BLOCKED"]
    assert 0 < len(blocked) <= 3 and sec["incidents"] == []


# --- hooks ---------------------------------------------------------------------------------


def lineage(records: list[dict], root_session: str) -> list[dict]:
    sessions, completions, out = {root_session}, set(), []
    for r in records:
        if r["session_id"] in sessions or r["parent_completion_id"] in completions:
            sessions.add(r["session_id"])
            if r["event"] == "session_completed":
                completions.add(r["completion_id"])
            out.append(r)
    return out


def test_hooks_cycles(samples):
    d, sec = section(samples, "hooks")
    records = read(d / sec["file"])
    assert [r["ts"] for r in records] == sorted(r["ts"] for r in records)
    assert {r["hook_origin_depth"] for r in records} == {0}
    assert list(records[0])[:8] == ["ts", "event", "source_agent", "target_agent",
                                    "completion_id", "session_id", "parent_completion_id",
                                    "hook_origin_depth"]
    for inc in sec["incidents"]:
        chain = lineage(records, inc["root_session"])
        fired = [r for r in chain if r["event"] == "hook_fired"]
        done = [r for r in chain if r["event"] == "session_completed"]
        assert len(chain) == inc["lines"] and len(fired) == inc["hooks_fired"]
        assert len(done) == inc["sessions"]
        assert round(sum(r["cost_usd"] for r in done), 2) == inc["cost_usd"]
        assert len({r["completion_id"] for r in done}) == len(done)
        k = len(inc["cycle"])
        targets = [r["target_agent"] for r in fired]
        assert targets[: 2 * k] == (inc["cycle"][1:] + inc["cycle"][:1]) * 2


def test_hooks_healthy_chains_end(twins):
    d, sec = section(twins, "hooks")
    records = read(d / sec["file"])
    assert sec["incidents"] == []
    assert sum(h["sessions"] for h in sec["healthy"]) * 3 - len(sec["healthy"]) == len(records)
    for h in sec["healthy"]:
        chain = lineage(records, h["root_session"])
        assert [r["target_agent"] for r in chain if r["event"] == "session_started"] == h["agents"]


def test_hooks_healthy_traffic_is_what_the_adopted_guards_allow_and_still_a_decoy(twins):
    """The twin's healthy hooks pass the write-up's adopted layers (so a replay of them finds
    zero false blocks) and still look like the loops: a review goes R → S → R along its lineage
    (one lap), and both agents of the A→B→A cycle run in a chain that ends."""
    d, sec = section(twins, "hooks")
    records = read(d / sec["file"])
    monitoring = {"annegreet", "eltjo", "victoria", "nessa", "mira"}
    fired = [r for r in records if r["event"] == "hook_fired"]
    assert not [r for r in fired if {r["source_agent"], r["target_agent"]} <= monitoring]
    reviews = [h for h in sec["healthy"] if h["kind"] == "review_round_trip"]
    assert len(reviews) == 2
    for h in reviews:
        hops = [r for r in lineage(records, h["root_session"]) if r["event"] == "hook_fired"]
        there, back = hops
        assert there["source_agent"] == back["target_agent"] == h["agents"][0] == h["agents"][-1]
        gap = dt.datetime.fromisoformat(back["ts"]) - dt.datetime.fromisoformat(there["ts"])
        assert dt.timedelta(minutes=30) < gap < dt.timedelta(minutes=45)
    handed = [h for h in sec["healthy"] if {"annegreet", "eltjo"} <= set(h["agents"])]
    assert len(handed) == 1 and handed[0]["hooks_fired"] >= 2
