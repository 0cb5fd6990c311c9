"""`loophound report` and `loophound investigate`: the HTML incident report.

`investigate PATH...` is the one command most people run: ingest, detect, attribute and write
the report, with progress on the terminal. `report` writes the report of a store that already
holds the logs.
"""

# No `from __future__ import annotations`: typer reads the option types of the commands
# defined inside register() at definition time, and they are local names there.

import datetime as dt
import shutil
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import typer

DEFAULT_OUT = Path("reports/incident.html")


def _when(value: str | None) -> dt.datetime | None:
    if value is None:
        return None
    try:
        t = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise typer.BadParameter(f"{value!r} is not an ISO-8601 time such as "
                                 "2026-06-19T08:00:00Z") from None
    return t if t.tzinfo else t.replace(tzinfo=dt.UTC)


def register(app: typer.Typer) -> None:
    from ..cli import (
        SEVERITIES,
        CallCostOpt,
        ConfigOpt,
        PricesOpt,
        SetOpt,
        StoreOpt,
        _scan,
        err,
        exit_status,
        fail,
        out,
        print_findings,
        print_ingest_report,
        run_ingest,
    )
    from ..store import DEFAULT_STORE

    OutOpt = Annotated[Path, typer.Option("--out", "-o", help="The HTML file to write (its folder "
                                                               "is created).")]
    GeneratedOpt = Annotated[str | None, typer.Option(
        "--generated-at", help="Generation time to print in the report (ISO-8601), for "
                               "reproducible files; default SOURCE_DATE_EPOCH, else now.")]

    def scan(store: Path, config, set_, prices, cost_per_call):
        got = _scan([], store, config, set_ or [], prices, cost_per_call)
        return got[0] if isinstance(got, tuple) else got  # (ScanResult, IngestReport)

    @contextmanager
    def step(text: str, spinner: bool = True):
        """One stage of the work: a spinner on a terminal, then a line with its time."""
        t0 = time.perf_counter()
        if err.is_terminal and spinner:
            with err.status(text + " …"):
                yield
        else:
            yield
        err.print(f"[dim]{text}: {time.perf_counter() - t0:.1f} s[/]", highlight=False)

    def write_report(result, out_file: Path, generated_at: str | None) -> None:
        from ..report import build, write

        with step("writing the report"):
            html = build(result, _when(generated_at))
            size = write(html, out_file)
        print_findings(result.document)
        out.print(f"report: {out_file} ({size / 1e6:.1f} MB); open it in any browser, offline",
                  highlight=False)

    @app.command("report")
    def report_cmd(
        out_file: OutOpt = DEFAULT_OUT,
        store: StoreOpt = Path(DEFAULT_STORE),
        config: ConfigOpt = None,
        set_: SetOpt = None,
        prices: PricesOpt = None,
        cost_per_call: CallCostOpt = None,
        generated_at: GeneratedOpt = None,
    ) -> None:
        """Write the HTML incident report of a store: one self-contained file to share.

        Example: loophound report --store .loophound --out reports/incident.html
        """
        _when(generated_at)
        with step("detecting loops and attributing cost"):
            result = scan(store, config, set_, prices, cost_per_call)
        write_report(result, out_file, generated_at)

    @app.command("investigate")
    def investigate_cmd(
        paths: Annotated[list[str], typer.Argument(help="Log files, directories or globs.")],
        out_file: OutOpt = DEFAULT_OUT,
        store: Annotated[Path | None, typer.Option(
            "--store", "-s", help="Keep the evidence store in this folder (reused and extended "
                                  "by later runs); default: a temporary store, removed at the "
                                  "end, so the report holds exactly PATHs.")] = None,
        config: ConfigOpt = None,
        set_: SetOpt = None,
        prices: PricesOpt = None,
        cost_per_call: CallCostOpt = None,
        generated_at: GeneratedOpt = None,
        fail_on: Annotated[str, typer.Option(help="Exit 1 when a finding is at least this "
                                             "severe: low, medium, high, critical or never.")]
        = "never",
    ) -> None:
        """Ingest PATHs, detect runaway loops, attribute their cost, write the HTML report.

        Example: loophound investigate sample_logs/ --out reports/incident.html
        """
        if fail_on not in SEVERITIES + ("never",):
            fail(f"--fail-on must be one of {', '.join(SEVERITIES)}, never; got {fail_on!r}")
        _when(generated_at)
        tmp = None
        if store is None:
            tmp = Path(tempfile.mkdtemp(prefix="loophound-store-"))
            store = tmp
        try:
            with step("reading the logs", spinner=False):  # ingest draws its own bar
                report = run_ingest(paths, store, None, None, 16 * 1024 * 1024)
            print_ingest_report(report, store if tmp is None else Path("(temporary store)"))
            with step("detecting loops and attributing cost"):
                result = scan(store, config, set_, prices, cost_per_call)
            write_report(result, out_file, generated_at)
            status = exit_status(result.document, fail_on)
            result.con.close()
        finally:
            if tmp is not None:
                shutil.rmtree(tmp, ignore_errors=True)
        raise typer.Exit(status)
