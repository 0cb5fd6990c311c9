"""Seeded synthetic logs with answer keys: realistic inputs for tests, demos and benchmarks.

None of the systems behind the seed incidents publishes a log that shows a real loop, so
loophound generates them from the documented formats (see each module). Every scenario is
deterministic (same seed, same bytes), comes with a clean twin (the same healthy background
without the incident) and returns an answer key stating what a detector should find.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .agents_sdk import write_agents_sdk_traces
from .bproxy import bproxy_full_incident, write_bproxy_log
from .claude_code import write_claude_code_project
from .codex import write_codex_sessions
from .hooks import write_hooks_log
from .labtrust import write_labtrust_run
from .otlp import write_otlp_traces
from .subagents import write_subagent_sessions
from .sven import write_sven_store
from .trajectory import write_trajectories

__all__ = ["SECTIONS", "bproxy_full_incident", "write_agents_sdk_traces", "write_bproxy_log",
           "write_claude_code_project", "write_subagent_sessions",
           "write_clean_twins", "write_codex_sessions", "write_full_incident", "write_hooks_log",
           "write_labtrust_run", "write_otlp_traces", "write_samples", "write_sven_store",
           "write_trajectories"]

Writer = Callable[..., dict[str, Any]]

# sub-directory → how to write it; each writer takes (outdir, seed, incident=...)
SECTIONS: dict[str, Writer] = {
    "bproxy": lambda out, seed, incident: write_bproxy_log(  # with the stuck agents and decoys
        out, seed, incident=incident, stuck=True),
    "bproxy-trimmed": lambda out, seed, incident: write_bproxy_log(
        out, seed, incident=incident, trimmed=True),
    "sven": write_sven_store,
    "labtrust": write_labtrust_run,
    "hooks": write_hooks_log,
    "claude-code": write_claude_code_project,
    "codex": write_codex_sessions,
    "otlp": write_otlp_traces,
    "trajectory": write_trajectories,
}


def _write_tree(outdir: Path, seed: int, incident: bool) -> dict[str, Any]:
    expected: dict[str, Any] = {"seed": seed, "incidents_included": incident, "sections": {}}
    for name, writer in SECTIONS.items():
        truth = writer(outdir / name, seed, incident=incident)
        expected["sections"][name] = {"dir": name} | truth
    text = json.dumps(expected, indent=2, ensure_ascii=False) + "\n"
    (outdir / "EXPECTED.json").write_text(text, encoding="utf-8")
    return expected


def write_samples(outdir: Path, seed: int = 7) -> dict[str, Any]:
    """Write the `sample_logs/` tree (one directory per format, every file under 1 MB) and
    its answer key `EXPECTED.json`; return that key. In each section, file paths are relative
    to the section's `dir` and line numbers are 1-based. Files left by a run with another
    seed are not removed."""
    return _write_tree(Path(outdir), seed, incident=True)


def write_clean_twins(outdir: Path, seed: int = 7) -> dict[str, Any]:
    """Write the same tree without the incidents: the healthy background line for line.
    A detector that flags anything here has a false positive."""
    return _write_tree(Path(outdir), seed, incident=False)


def write_full_incident(path: Path, seed: int = 1) -> dict[str, Any]:
    """Write seed 001 at full size (~1.2 M lines, ~235 MiB) to `path` for benchmarks and
    return its answer key."""
    return bproxy_full_incident(Path(path), seed)
