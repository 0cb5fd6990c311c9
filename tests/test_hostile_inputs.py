"""Inputs that are not files are named, never read as nothing; names that look alike are shown
apart on the terminal, in JSON to a terminal and in the report."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from loophound.cli import app
from loophound.report.fmt import esc
from loophound.text import apart, inert, json_inert

ROOT = Path(__file__).resolve().parents[1]
HOOKS = ROOT / "sample_logs" / "hooks" / "hooks.jsonl"


def run(*args: str):
    return CliRunner().invoke(app, [str(a) for a in args])


# -- inputs that are not regular files -------------------------------------------------------

@pytest.mark.parametrize("kind", ["fifo", "/dev/zero", "/dev/urandom", "symlink loop"])
def test_a_named_input_that_is_no_file_is_refused_with_its_reason(tmp_path, kind):
    if kind == "fifo":
        path, why = tmp_path / "pipe.jsonl", "named pipe"
        os.mkfifo(path)
    elif kind == "symlink loop":
        path, why = tmp_path / "loop.jsonl", "loops"
        path.symlink_to(path)
    else:
        path, why = Path(kind), "character device"
    done = run("ingest", path, "--store", tmp_path / "st")
    assert done.exit_code == 2, done.output
    assert done.output.startswith("error:") and why in done.output


def test_what_is_no_file_in_a_folder_is_named_and_the_rest_read(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    shutil.copy(HOOKS, logs / "hooks.jsonl")
    os.mkfifo(logs / "pipe.jsonl")
    (logs / "loop.jsonl").symlink_to(logs / "loop.jsonl")
    done = run("ingest", logs, "--store", tmp_path / "st")
    assert done.exit_code == 0, done.output
    text = " ".join(done.output.split())
    assert "pipe.jsonl: not read: a named pipe" in text
    assert "loop.jsonl: not read: a symbolic link that loops" in text
    lines = HOOKS.read_bytes().count(b"\n")
    assert f"{lines:,} events" in text


# -- lookalike names ------------------------------------------------------------------------

LOOKALIKES = {
    "zero-width space": "adm\u200bin", "Cyrillic а": "\u0430dmin", "soft hyphen": "ad\u00admin",
    "left-to-right mark": "admin\u200e", "fullwidth a": "\uff41dmin",
    "no-break space": "admin\u00a0", "Greek ο": "adm\u03bfin", "word joiner": "ad\u2060min",
    "mathematical a": "\U0001d41admin", "tag character": "admin\U000e0041",
}


@pytest.mark.parametrize("show", [inert, apart, esc])
def test_every_lookalike_of_a_name_is_shown_apart_from_it(show):
    shown = {name: show(text) for name, text in LOOKALIKES.items()}
    assert show("admin") == "admin"
    assert "admin" not in shown.values(), shown
    assert len(set(shown.values())) == len(LOOKALIKES)


@pytest.mark.parametrize("word", ["привет", "café", "日本語", "Straße", "naïve", "Ελλάδα"])
def test_a_word_in_one_script_is_left_as_it_is(word):
    assert inert(word) == word == apart(word)


@given(st.text())
def test_json_to_a_terminal_is_the_same_value(text):
    assert json.loads(json_inert(json.dumps(text, ensure_ascii=False))) == text


def test_sql_shows_lookalike_actors_apart(tmp_path):
    log = tmp_path / "actors.jsonl"
    names = ["admin", *LOOKALIKES.values()]
    log.write_text("".join(json.dumps({"timestamp": 1750000000 + i, "from": n, "to": "db",
                                       "error": "E"}, ensure_ascii=False) + "\n"
                           for i, n in enumerate(names)), encoding="utf-8")
    assert run("ingest", log, "--store", tmp_path / "st").exit_code == 0
    done = run("sql", "SELECT DISTINCT actor FROM events ORDER BY actor", "--store",
               tmp_path / "st")
    assert done.exit_code == 0, done.output
    cells = [line.strip() for line in done.output.splitlines()[2:-1]]
    assert len(cells) == len(names) and len(set(cells)) == len(names)
    assert cells.count("admin") == 1
