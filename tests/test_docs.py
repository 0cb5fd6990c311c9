"""The README is the manual: it must name every command with an example, every column, every
detector parameter, and its generated parts must match the code."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import typer.main

from loophound.cli import app
from loophound.scan import detector_docs
from loophound.schema import COLUMNS

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def commands(group=None, prefix="") -> list[str]:
    click_group = group or typer.main.get_command(app)
    names = []
    for name, cmd in click_group.commands.items():
        if hasattr(cmd, "commands"):
            names += commands(cmd, f"{prefix}{name} ")
        else:
            names.append(prefix + name)
    return names


def test_every_command_has_an_example_in_the_readme():
    missing = [c for c in commands() if not re.search(rf"loophound {re.escape(c)}\b", README)]
    assert missing == []


def test_every_command_help_shows_an_example():
    group = typer.main.get_command(app)

    def walk(g):
        for cmd in g.commands.values():
            yield from walk(cmd) if hasattr(cmd, "commands") else [cmd]

    assert [c.name for c in walk(group) if "Example" not in (c.help or "")] == []


def test_every_column_and_detector_parameter_is_documented():
    assert [c.name for c in COLUMNS if f"`{c.name}`" not in README] == []
    for name, _, params in detector_docs():
        assert f"`{name}`" in README
        assert [p for p, _, _ in params if f"`{p}`" not in README] == [], name


def test_generated_parts_of_the_readme_are_current():
    spec = importlib.util.spec_from_file_location("build_readme", ROOT / "docs" / "build_readme.py")
    build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)
    assert build.build(README) == README, "run: python docs/build_readme.py"


def test_the_quick_start_keeps_its_store_and_its_next_step_queries_it(tmp_path, monkeypatch):
    """The quick start's `investigate` keeps the evidence (`--store`), and the `sql` shown
    next runs on it: before, `loophound sql` said "no loophound store" after the quick start."""
    import shlex

    from typer.testing import CliRunner

    start = README[README.index("## Quick start"):README.index("Run the tests:")]
    commands = [line.split(".venv/bin/loophound ", 1)[1] for line in start.splitlines()
                if ".venv/bin/loophound " in line]
    assert len(commands) == 2 and "--store" in commands[0] and commands[1].startswith("sql ")
    (tmp_path / "sample_logs").symlink_to(ROOT / "sample_logs")
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    made = runner.invoke(app, shlex.split(commands[0]))
    assert made.exit_code == 0, made.output
    assert (tmp_path / "reports" / "incident.html").exists()
    asked = runner.invoke(app, shlex.split(commands[1]))
    assert asked.exit_code == 0 and "repeated_error" in asked.stdout, asked.output
