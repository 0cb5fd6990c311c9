"""The `loophound` command: a thin shell over ingest, store, detect, attribute and report."""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from . import __version__, formats
from .ingest import IngestError, IngestOptions, IngestReport, ingest
from .store import DEFAULT_STORE, Store, StoreBusy, StoreMissing

app = typer.Typer(
    help="Forensics for runaway AI-agent loops: ingest JSONL logs, detect loops, attribute cost.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
out = Console()
err = Console(stderr=True)

StoreOpt = Annotated[Path, typer.Option("--store", "-s", help="Store folder.")]


def fail(message: str, code: int = 2) -> None:
    err.print(f"[bold red]error:[/] {message}", highlight=False, markup=True)
    raise typer.Exit(code)


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


def _load_mapping(path: Path | None) -> dict | None:
    if path is None:
        return None
    try:
        return tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        fail(f"cannot read mapping file {path}: {exc}")
    return None


def run_ingest(paths: list[str], store: Path, fmt: str | None, mapping: Path | None,
               max_line_bytes: int, wait: bool = True, quiet: bool = False) -> IngestReport:
    """Ingest with a progress bar on a terminal; errors become messages, not tracebacks."""
    from rich.progress import BarColumn, DownloadColumn, Progress, TimeRemainingColumn

    options = IngestOptions(format=fmt, mapping=_load_mapping(mapping),
                            max_line_bytes=max_line_bytes, wait=wait)
    show = err.is_terminal and not quiet
    try:
        with Progress("[progress.description]{task.description}", BarColumn(), DownloadColumn(),
                      TimeRemainingColumn(), console=err, disable=not show,
                      transient=True) as bar:
            task = bar.add_task("ingesting", total=None)

            def on_progress(done: int, total: int) -> None:
                bar.update(task, completed=done, total=total)

            def on_wait() -> None:
                err.print(f"waiting: another loophound process is writing to {store} ...")

            return ingest(paths, Store(store), options, on_progress, on_wait)
    except (IngestError, formats.UnknownFormat, StoreBusy) as exc:
        fail(str(exc))
    raise AssertionError("unreachable")


def print_ingest_report(report: IngestReport, store: Path) -> None:
    table = Table(title=None, show_edge=False, header_style="bold")
    for col in ("file", "format", "status", "events", "quarantined", "bytes read"):
        table.add_column(col, justify="right" if col in ("events", "quarantined",
                                                          "bytes read") else "left")
    for f in report.files:
        if f.status == "skipped":
            continue
        table.add_row(f.path, f.format or "-", f.status, f"{f.events:,}",
                      f"{sum(f.quarantined.values()):,}", f"{f.new_bytes:,}")
    out.print(table)
    for f in report.files:
        for reason, n in sorted(f.quarantined.items()):
            err.print(f"[yellow]quarantined[/] {f.path}: {n:,} line(s) {reason.replace('_', ' ')}",
                      highlight=False)
        if f.pending:
            err.print(f"[yellow]pending[/] {f.path}:{f.pending.line}: last line has no newline "
                      f"({f.pending.byte_length:,} bytes); it will be read once complete",
                      highlight=False)
        for w in f.warnings:
            err.print(f"[yellow]warning[/] {f.path}: {w}", highlight=False)
        if f.status == "skipped":
            err.print(f"[dim]skipped[/] {f.path}: {f.skipped_reason}", highlight=False)
    out.print(f"{report.events:,} events, {report.quarantined:,} quarantined lines "
              f"→ store {store}  (see them with: loophound sql \"SELECT * FROM quarantine\")",
              highlight=False)


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
) -> None:
    """Read logs into the store: Parquet events plus a DuckDB catalog.

    Example: loophound ingest sample_logs/ --store .loophound
    """
    report = run_ingest(paths, store, fmt, mapping, max_line_bytes, wait=not no_wait)
    print_ingest_report(report, store)


@app.command("formats")
def formats_cmd() -> None:
    """List the log formats loophound reads, with a one-line description."""
    table = Table(show_edge=False, header_style="bold")
    table.add_column("format")
    table.add_column("description")
    for f in formats.FORMATS.values():
        table.add_row(f.name, f.description)
    out.print(table)


def _open_store(store: Path) -> Store:
    s = Store(store)
    if not s.exists():
        fail(str(StoreMissing(f"no loophound store at {store}: run `loophound ingest PATH "
                              f"--store {store}` first")))
    return s


if __name__ == "__main__":  # pragma: no cover
    sys.exit(app())
