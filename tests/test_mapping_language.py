"""The mapping language: conditions, time formats, several fields, epoch units, first-line
values, arguments and results; and the mistakes it catches before any work."""

from __future__ import annotations

import json

import pytest

from loophound.errors import MappingError
from loophound.formats.generic import validate_mapping
from loophound.ingest import IngestOptions, ingest
from loophound.store import Store

LINES = [
    {"meta": {"session": "s-42", "agent": "builder"}, "date": "2005-12-04", "time": "04:47:40",
     "when": "Sun Dec 04 04:47:40 2005", "t": 1133671660000},
    {"date": "2005-12-04", "time": "04:47:41", "when": "Sun Dec 04 04:47:41 2005",
     "t": 1133671661000, "cmd": "git commit -m x", "exit_code": 1,
     "stderr": "hook rejected commit abc12345"},
    {"date": "2005-12-04", "time": "04:47:42", "when": "Sun Dec 04 04:47:42 2005",
     "t": 1133671662000, "cmd": "git commit -m x", "exit_code": 1,
     "stderr": "hook rejected commit abc12399"},
    {"date": "2005-12-04", "time": "04:47:43", "when": "Sun Dec 04 04:47:43 2005",
     "t": 1133671663000, "cmd": "ls", "exit_code": 0, "stderr": ""},
]


def read(tmp_path, mapping: dict, columns: str) -> list[tuple]:
    log = tmp_path / "log.jsonl"
    log.write_text("".join(json.dumps(r) + "\n" for r in LINES))
    store = Store(tmp_path / "st")
    report = ingest([str(log)], store, IngestOptions(format="generic",
                                                      mapping=validate_mapping(mapping)))
    rows = store.connect().execute(f"SELECT {columns} FROM events ORDER BY line").fetchall()
    return rows, report


def test_conditions_first_line_values_and_joined_fields(tmp_path):
    rows, _ = read(tmp_path, {
        "fields": {"time": {"paths": ["date", "time"], "format": "%Y-%m-%d %H:%M:%S"},
                   "session": {"path": "meta.session", "first_line": True},
                   "actor": {"path": "meta.agent", "first_line": True},
                   "ok": {"path": "exit_code", "equals": 0},
                   "error": {"path": "stderr", "when": {"path": "exit_code", "not_equals": 0}},
                   "action": "cmd", "args": "cmd", "result": "stderr"},
        "constants": {"kind": "tool_call"}}, "strftime(ts, '%H:%M:%S'), session, actor, ok, "
                                             "error, action_key, result_key")
    assert [r[0] for r in rows] == ["04:47:40", "04:47:41", "04:47:42", "04:47:43"]
    assert {(r[1], r[2]) for r in rows} == {("s-42", "builder")}
    assert [r[3] for r in rows] == [None, False, False, True]
    assert [r[4] for r in rows] == [None, "hook rejected commit abc12345",
                                    "hook rejected commit abc12399", None]  # never error "0"
    assert rows[1][5] == rows[2][5] != rows[3][5]  # the same call, another commit hash
    assert rows[1][6] == rows[2][6]  # the same result once its hash is masked


@pytest.mark.parametrize("spec", [
    {"path": "when", "format": "%a %b %d %H:%M:%S %Y"},
    {"path": "t", "unit": "ms"},
])
def test_time_in_a_stated_shape(tmp_path, spec):
    rows, _ = read(tmp_path, {"fields": {"time": spec, "actor": "cmd"}},
                   "strftime(ts, '%Y-%m-%d %H:%M:%S')")
    assert [r[0] for r in rows] == [f"2005-12-04 04:47:4{i}" for i in range(4)]


def test_a_path_no_line_holds_is_reported(tmp_path):
    _, report = read(tmp_path, {"fields": {"time": "when", "actor": "agnet"}}, "1")
    assert any('actor = "agnet" matched none' in w for w in report.files[0].warnings)


@pytest.mark.parametrize(("mapping", "words"), [
    ({"fields": {"error": {"path": "stderr", "equals": "x"}}}, "decides `ok` only"),
    ({"fields": {"time": {"path": "t", "unit": "hours"}}}, "unit must be one of"),
    ({"fields": {"ok": {"path": "a", "equals": 0, "one_of": [1]}}}, "one of"),
    ({"fields": {"time": {"paths": "date"}}}, "paths"),
    ({"fields": {"actor": {"path": "a", "first_lien": True}}}, "did you mean first_line"),
    ({"fields": {"error": {"path": "e", "when": {"path": "x"}}}}, "exactly one of"),
    ({"fields": {"actor": {"path": "a", "format": "%Y"}}}, "for time only"),
])
def test_mistakes_are_named_before_any_work(mapping, words):
    with pytest.raises(MappingError, match=words):
        validate_mapping(mapping, "m.toml")


def test_a_mapping_reads_the_list_of_records_of_a_whole_file_document(tmp_path):
    """`records = "events"`: a whole-file JSON document (not lines) read by its list; each
    record is an event whose offsets are its own bytes in the file; the loop in it is found."""
    from loophound.scan import scan_store

    doc = {"run": {"id": "r1"}, "events": [
        {"t": 1750000000 + i, "who": "planner", "tool": "search",
         "status": "error" if i < 12 else "ok", "msg": f"rate limited (req {i})"}
        for i in range(15)]}
    path = tmp_path / "run.json"
    path.write_text(json.dumps(doc, indent=2))
    mapping = validate_mapping({
        "records": "events",
        "fields": {"time": "t", "actor": "who", "action": "tool", "session": "tool",
                   "error": {"path": "msg", "when": {"path": "status", "equals": "error"}}},
        "constants": {"kind": "tool_call"}})
    store = Store(tmp_path / "st")
    report = ingest([str(path)], store, IngestOptions(mapping=mapping))
    assert report.events == 15
    data = path.read_bytes()
    first = store.connect().execute(
        "SELECT byte_offset, byte_length FROM events WHERE line = 1").fetchall()[0]
    assert json.loads(data[first[0]:first[0] + first[1]])["msg"] == "rate limited (req 0)"
    found = scan_store(store, save=False).document["findings"]
    runs = [f for f in found if f["detector"] == "repeated_error"]
    assert [f["events"] for f in runs] == [12]  # one error, whatever the request number


def test_records_must_be_a_path():
    with pytest.raises(MappingError, match="records must be"):
        validate_mapping({"records": 3}, "m.toml")
