"""The `loophound` command: a thin shell over ingest, store, detect, attribute and report."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from . import __version__
from .commands.engine import (
    EngineOpt,
    OnlyOpt,
    SparkMasterOpt,
    engine_of,
    only_list,
    spark_ingest,
    spark_scan,
)
from .commands.shell import (
    DEFAULT_STORE,
    SEVERITIES,
    AlertOnOpt,
    AlertsOpt,
    CallCostOpt,
    ConfigOpt,
    FindingsDirOpt,
    FindingsListOpt,
    FormatOpt,
    LookbackOpt,
    MappingOpt,
    NoWaitOpt,
    PricesOpt,
    QuietOpt,
    SetOpt,
    StoreOpt,
    WebhookOpt,
    err,
    exit_status,
    fail,
    incremental_scan,
    out,
    print_ingest_report,
    print_summary,
    refuse_evidence,
    run_ingest,
    say_error,
    scan_store_cmd,
    user_errors,
    write_json,
)
from .errors import UserError
from .store import Store
from .text import inert

app = typer.Typer(
    help="Forensics for runaway AI-agent loops: ingest JSONL logs, detect loops, attribute cost.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)







def version_callback(value: bool) -> None:
    if value:
        out.print(f"loophound {__version__}")
        raise typer.Exit()


@app.callback()
def main(
    version: Annotated[bool, typer.Option("--version", callback=version_callback,
                                          is_eager=True, help="Print the version.")] = False,
) -> None:
    """Forensics for runaway AI-agent loops."""








@app.command("ingest")
def ingest_cmd(
    paths: Annotated[list[str], typer.Argument(help="Files, directories or globs to read.")],
    store: StoreOpt = Path(DEFAULT_STORE),
    fmt: Annotated[str | None, typer.Option("--format", "-f",
                                            help="Read every file as this format "
                                                 "(see `loophound formats`).")] = None,
    mapping: Annotated[Path | None, typer.Option(
        "--mapping", help="TOML file naming the fields of a JSONL format loophound "
                          "does not know.")] = None,
    max_line_bytes: Annotated[int, typer.Option(help="Longer lines are quarantined.")]
    = 16 * 1024 * 1024,
    no_wait: Annotated[bool, typer.Option("--no-wait", help="Exit at once if another "
                                          "process is writing to the store.")] = False,
    engine: EngineOpt = "duckdb",
    spark_master: SparkMasterOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Read logs into the store: Parquet events plus a DuckDB catalog.

    Example: loophound ingest sample_logs/ --store .loophound
    """
    if engine_of(engine) == "spark":
        report = spark_ingest(paths, store, fmt, mapping, max_line_bytes, not no_wait,
                              spark_master)
    else:
        report = run_ingest(paths, store, fmt, mapping, max_line_bytes, wait=not no_wait,
                            quiet=quiet)
    print_ingest_report(report, store)
    from .api import refuse_non_logs

    with user_errors():  # the table said what was passed over; then why that is a mistake
        refuse_non_logs(report, paths)


@app.command("formats")
def formats_cmd() -> None:
    """List the log formats loophound reads, with a one-line description.

    Example: loophound formats
    """
    from . import formats

    table = Table(show_edge=False, header_style="bold")
    table.add_column("format")
    table.add_column("description")
    for f in formats.FORMATS.values():
        table.add_row(f.name, f.description)
    out.print(table)


@app.command("verify")
def verify_cmd(store: StoreOpt = Path(DEFAULT_STORE)) -> None:
    """Re-hash every input, and every file of the store, and compare with the SHA-256 recorded.

    Scheduled scans check only the first and last 4 KiB of what they read before; this reads
    it all: each input against the hash recorded when it was read, then each Parquet file the
    catalog lists (events, quarantine, saved runs) against the hash recorded when it was
    committed. Exit status 1 when a file changed, or is gone. A copy of a
    store's Parquet folders (no catalog) has nothing recorded to compare with: each of its
    files is read whole and hashed, and any unreadable one gives status 1.

    Example: loophound verify --store .loophound
    """
    from . import api

    with user_errors():
        verdicts = api.verify(store)
    table = Table(show_edge=False, header_style="bold")
    bare = Store(store).is_bare
    for col in ("file", "bytes", "sha256", "verdict"):
        table.add_column(col, overflow="fold")
    bad = 0
    for v in verdicts:
        bad += not v.ok
        table.add_row(escape(inert(v.path)), f"{v.bytes:,}", v.sha256[:16] + "…",
                      escape(v.verdict))
    out.print(table)
    if bare:
        err.print(f"{escape(str(store))} has no catalog (a copy of a store's Parquet folders): "
                  "no hash was recorded to compare with; each file above was read whole. "
                  "Compare these hashes with `sha256sum` of the original's files.",
                  highlight=False)
    raise typer.Exit(1 if bad else 0)














@app.command("scan")
def scan_cmd(
    paths: Annotated[list[str] | None, typer.Argument(help="Logs to ingest first (optional).")]
    = None,
    store: StoreOpt = Path(DEFAULT_STORE),
    json_out: Annotated[Path | None, typer.Option("--json", help="Write the findings "
                                                  "(loophound.findings/v1) to this file; - for "
                                                  "standard output.")] = None,
    fail_on: Annotated[str, typer.Option(help="Exit 1 when an incident (with --incremental: "
                                         "an alert) is at least this severe: low, medium, "
                                         "high, critical or never.")] = "high",
    incremental: Annotated[bool, typer.Option("--incremental", help="For cron: read only new "
                                              "bytes, print only alerts (an incident new, "
                                              "escalated or ended) as JSON lines.")] = False,
    alerts: AlertsOpt = None,
    webhook: WebhookOpt = None,
    alert_on: AlertOnOpt = "high",
    lookback: LookbackOpt = "1h",
    no_wait: NoWaitOpt = False,
    config: ConfigOpt = None,
    set_: SetOpt = None,
    prices: PricesOpt = None,
    cost_per_call: CallCostOpt = None,
    findings_dir: FindingsDirOpt = None,
    list_findings: FindingsListOpt = False,
    fmt: FormatOpt = None,
    mapping: MappingOpt = None,
    only: OnlyOpt = None,
    engine: EngineOpt = "duckdb",
    spark_master: SparkMasterOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Run every detector over the store (ingesting PATHs first) and keep the findings.

    Prints the incidents (one per runaway loop, with the detectors that saw it); --findings
    lists every finding too.

    A store that may not be written (a copy of a store's Parquet folders, a read-only mount)
    is never changed: the findings go to --findings-dir, or a new temporary folder, and the
    output says where.

    Exit status: 0 no incident at or above --fail-on, 1 there is one, 2 usage or input error.

    Example: loophound scan sample_logs/ --json findings.json --fail-on critical
    """
    for name, value in (("--fail-on", fail_on), ("--alert-on", alert_on)):
        if value not in SEVERITIES + ("never",):
            fail(f"{name} must be one of {', '.join(SEVERITIES)}, never; got {value!r}")
    spark = engine_of(engine, incremental) == "spark"
    if incremental:  # incremental_scan checks its outputs
        from .watch import parse_every

        try:
            lookback_s = parse_every(lookback)
        except ValueError as exc:
            fail(str(exc).replace("--every", "--lookback"))
        raise typer.Exit(incremental_scan(paths or [], store, fail_on, alerts, webhook, alert_on,
                                          not no_wait, config, set_ or [], prices, cost_per_call,
                                          json_out, lookback_s, quiet))
    if incremental and findings_dir is not None:
        fail("--findings-dir goes with a full scan: a scheduled scan keeps its findings in "
             "its store")
    to_stdout = json_out is not None and str(json_out) == "-"
    refuse_evidence(store, paths, {"--json": json_out, "--alerts": alerts,
                                   "--findings-dir": findings_dir})
    if spark:
        result = spark_scan(paths or [], store, config, set_ or [], prices, cost_per_call,
                            only_list(only), findings_dir, not no_wait, fmt, mapping,
                            spark_master, quiet or to_stdout)
    else:
        result, ingested = scan_store_cmd(paths or [], store, config, set_ or [], prices,
                                          cost_per_call, quiet=quiet or to_stdout,
                                          wait=not no_wait,
                                          save_to=findings_dir, fmt=fmt, mapping=mapping,
                                          only=only_list(only), show_ingest=False)
    write_json(result.document, json_out)
    if json_out is None or str(json_out) != "-":
        print_summary(result.document, findings=list_findings,
                      ingested=None if spark else ingested, store=store)
    raise typer.Exit(exit_status(result.document, fail_on))








# Commands that live in their own modules (each has `register(app)`), registered here so the
# whole command line is still listed in one place.
COMMAND_MODULES = ("sql", "report", "watch", "synth", "guards")


def _register_commands() -> None:
    from .registry import present

    for module in present("loophound.commands", COMMAND_MODULES):
        module.register(app)


_register_commands()


def _watch_interrupts():
    """Note a Ctrl-C as it comes (and raise KeyboardInterrupt, as Python does): what it breaks
    may surface as another exception (DuckDB's "Query interrupted"), which is then said as
    the interruption it is, not as a bug. Returns the function that says whether one came."""
    import signal
    import threading

    came = threading.Event()
    if (threading.current_thread() is threading.main_thread()
            and signal.getsignal(signal.SIGINT) is signal.default_int_handler):
        def on_sigint(signum, frame) -> None:
            came.set()
            signal.default_int_handler(signum, frame)

        signal.signal(signal.SIGINT, on_sigint)
        _RESTORE.append(lambda: signal.signal(signal.SIGINT, signal.default_int_handler))
    return came.is_set


_RESTORE: list = []  # what `run` puts back as it ends (it may be called in a longer process)


def _say_interrupted() -> None:
    """The sentence for Ctrl-C, and exit status 130."""
    say_error("interrupted (Ctrl-C): the command stopped; a store keeps only what it had "
              "committed and no output file is left half-written; run the command again")
    sys.exit(130)


def run() -> None:
    """Console entry point. A user's mistake (any `UserError`) or the machine's condition (a
    full disk, a read-only file system, a permission refused) is one line, `error: ...`, and
    exit status 2; a bug in loophound is reported in one paragraph, not a traceback (set
    LOOPHOUND_DEBUG=1 to see the traceback), and exit status 3."""
    import gc
    import os

    from .errors import machine_condition

    # numpy's OpenBLAS starts a thread per core that spins for work after numpy loads (0.1 s
    # of CPU) and loophound calls no BLAS routine: on two cores that time is taken from
    # ingest and the scan. This process is the command's own, and numpy is not loaded yet.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    interrupted = _watch_interrupts()
    try:
        app()
    except SystemExit as exc:  # typer turns Ctrl-C into exit status 130, silently
        if interrupted() and exc.code not in (0, None):
            _say_interrupted()
        raise
    except KeyboardInterrupt:
        _say_interrupted()
    except UserError as exc:
        say_error(str(exc))
        sys.exit(exc.exit_code)
    except Exception as exc:  # noqa: BLE001 — the last line of defence for the user
        if interrupted():  # DuckDB's "Query interrupted", its InterruptException, ...
            _say_interrupted()
        condition = machine_condition(exc)
        if condition is not None:
            say_error(str(condition))
            sys.exit(condition.exit_code)
        if os.environ.get("LOOPHOUND_DEBUG"):
            raise
        err.print(f"[bold red]internal error:[/] {escape(type(exc).__name__)}: "
                  f"{escape(inert(str(exc), newlines=True))}\n"
                  "This is a bug in loophound. Run again with LOOPHOUND_DEBUG=1 for the details "
                  "and report them.", highlight=False)
        sys.exit(3)
    finally:
        # The command's files are written and closed by now. What is left is the interpreter's
        # teardown, whose last garbage collection walks every object DuckDB, pyarrow, numpy
        # and typer made: 0.17 s after a scheduled scan, 0.05 s with them frozen. Frozen
        # objects are not walked; the process returns their memory when it ends.
        gc.freeze()
        while _RESTORE:
            _RESTORE.pop()()


if __name__ == "__main__":  # pragma: no cover
    run()
