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
