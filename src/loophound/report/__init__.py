"""The HTML incident report: one self-contained file a person opens offline.

`gather` (model.py) computes what the report shows from a scan; the sections render it; html.py
assembles the page. `build` does all three; `write` puts the result on disk atomically.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

from .html import Charts, page
from .model import Report, gather
from .style import CSS


def render(report: Report) -> str:
    from .sections import SECTIONS

    charts = Charts()
    body = "\n".join(s.render(report, charts) for s in SECTIONS)
    return page(report.title, body, CSS, report.generated_at, report.tool_version)


def prepare() -> None:
    """Do now what rendering a first report costs beyond its data: importing the sections
    and plotly, plotly's first figure, reading and hashing plotly.js (0.15-0.5 s, more on a
    busy machine). `investigate` calls it in a thread while the logs are read and scanned,
    which leave a core idle; whatever it did not finish, `render` does as before."""
    from . import charts, html
    from .sections import SECTIONS  # noqa: F401 — imported for what they import

    charts.warm_up()
    html.script_sources()


def build(result: Any, generated_at: dt.datetime | str | None = None,
          guards: dict | None = None) -> str:
    """The report of a `ScanResult` (or a saved run) as one HTML string; with `guards` (a
    `loophound.guards/v1` document), the section "What would have stopped it" too."""
    report = gather(result, generated_at)
    report.guards = guards
    return render(report)


def write(html: str, out: Path) -> int:
    """Write atomically (a half-written report is never left behind); return its size. The
    caller has checked `out` is no evidence (`outputs.check_output`)."""
    from ..outputs import write_atomically

    return write_atomically(out, html)


__all__ = ["Report", "build", "gather", "prepare", "render", "write"]
