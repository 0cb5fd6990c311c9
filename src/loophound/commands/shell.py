"""What every command shares: the consoles, how a mistake is said, the common options, and
how ingest reports and findings are printed. The commands (in `cli` and in this package) are a
few lines each over `loophound.api` and these."""

from __future__ import annotations

import datetime as dt
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ..errors import StoreBusy, UserError, no_store
from ..store import DEFAULT_STORE, Store
from ..text import inert, json_inert
from ..vocabulary import SEVERITIES, Verdict

if TYPE_CHECKING:  # ingest (the formats, numpy, pyarrow) is imported by the commands that read
    from ..ingest import IngestReport  # logs, when they run: `sql` and `--help` never load it

__all__ = ["DEFAULT_STORE", "SEVERITIES"]


# Wide when writing to a file or pipe, so paths and titles are not cut.
out = Console(width=None if sys.stdout.isatty() else 200)


err = Console(stderr=True, width=None if sys.stderr.isatty() else 200)


StoreOpt = Annotated[Path, typer.Option("--store", "-s", help="Store folder.")]
QuietOpt = Annotated[bool, typer.Option(
    "--quiet", "-q", help="No progress on the terminal (there is none when standard error is "
                          "not a terminal: cron, a pipe).")]


class Phases:
    """Progress of a long command on a terminal: each phase named with a spinner (reading
    the logs shows its bytes), then a line with its time; nothing at all when standard error
    is not a terminal (cron mails what a job prints) or the user asked for `--quiet`."""

    def __init__(self, quiet: bool = False) -> None:
        self.on = not quiet and err.is_terminal
        self._status = None
        self._name = ""

    @contextmanager
    def step(self, text: str) -> Iterator[None]:
        if not self.on:
            yield
            return
        t0 = time.perf_counter()
        with err.status(f"{text} …") as status:
            self._status, self._name = status, text
            try:
                yield
            finally:
                self._status = None
        err.print(f"[dim]{text}: {time.perf_counter() - t0:.1f} s[/]", highlight=False)

    def on_progress(self, done: int, total: int) -> None:
        """Ingest's bytes read so far, on the phase's line."""
        if self._status is not None and total:
            self._status.update(f"{self._name} … {done / 1e6:,.1f} of {total / 1e6:,.1f} MB "
                                f"({done / total:.0%})")


def shown(text: object) -> str:
    """Text from the logs (a path, an actor, a title, a reason) for a markup string: inert
    (control characters and bidi overrides escaped) and with its markup escaped."""
    return escape(inert(str(text)))


def say_error(message: str) -> None:
    """`error: message` on standard error, on one line, the message shown as text (not markup,
    and inert: it may quote a path or a value from the logs)."""
    err.print(f"[bold red]error:[/] {shown(' '.join(message.split()))}", highlight=False,
              soft_wrap=True)


def fail(message: str, code: int = 2) -> None:
    """Say what the user got wrong and leave the command with `code` (2)."""
    say_error(message)
    raise typer.Exit(code)


def load_mapping_file(path: Path | None) -> dict | None:
    """The --mapping file, read and checked before any ingest work (MappingError if bad)."""
    from ..formats.generic import load_mapping

    return None if path is None else load_mapping(path)


def run_ingest(paths: list[str], store: Path, fmt: str | None, mapping: Path | None,
               max_line_bytes: int, wait: bool = True, quiet: bool = False) -> IngestReport:
    """Ingest with a progress bar on a terminal; errors become messages, not tracebacks."""
    from ..ingest import IngestOptions, ingest

    def on_wait() -> None:
        err.print(f"waiting: another loophound process is writing to {shown(store)} ...",
                  highlight=False)

    try:
        options = IngestOptions(format=fmt, mapping=load_mapping_file(mapping),
                                max_line_bytes=max_line_bytes, wait=wait)
        if quiet or not err.is_terminal:  # cron: no bar, and no 0.05 s importing one
            return ingest(paths, Store(store), options, None, on_wait)
        from rich.progress import BarColumn, DownloadColumn, Progress, TimeRemainingColumn

        with Progress("[progress.description]{task.description}", BarColumn(), DownloadColumn(),
                      TimeRemainingColumn(), console=err, transient=True) as bar:
            task = bar.add_task("ingesting", total=None)

            def on_progress(done: int, total: int) -> None:
                bar.update(task, completed=done, total=total)

            return ingest(paths, Store(store), options, on_progress, on_wait)
    except (UserError, StoreBusy) as exc:  # a bad path, format or mapping; a busy store
        fail(str(exc), getattr(exc, "exit_code", 2))
    raise AssertionError("unreachable")


LISTED_FILES = 100  # an ingest of more files is shown by format and status, not file by file


def print_ingest_report(report: IngestReport, store: Path) -> None:
    """What ingest read; file names, reasons and warnings come from the logs: inert. Up to
    LISTED_FILES files a row each; more (a folder of 10,000 small logs, whose table took 4 s
    to draw) a row per format and status, every file with something to say still named
    below it."""
    read = [f for f in report.files if f.status != "skipped"]
    many = len(read) > LISTED_FILES
    table = Table(title=None, show_edge=False, header_style="bold")
    for col in ("files" if many else "file", "format", "status", "events", "quarantined",
                "bytes read"):
        table.add_column(col, justify="right" if col in ("files", "events", "quarantined",
                                                          "bytes read") else "left")
    if many:
        rows: dict[tuple[str, str], list[int]] = {}
        for f in read:
            row = rows.setdefault((f.format or "-", f.status), [0, 0, 0, 0])
            for i, n in enumerate((1, f.events, sum(f.quarantined.values()), f.new_bytes)):
                row[i] += n
        for (fmt, status), (files, events, quarantined, nbytes) in sorted(rows.items()):
            table.add_row(f"{files:,}", shown(fmt), status, f"{events:,}", f"{quarantined:,}",
                          f"{nbytes:,}")
    for f in [] if many else read:
        table.add_row(shown(f.path), shown(f.format or "-"), f.status, f"{f.events:,}",
                      f"{sum(f.quarantined.values()):,}", f"{f.new_bytes:,}")
    out.print(table)
    for f in report.files:
        for reason, n in sorted(f.quarantined.items()):
            err.print(f"[yellow]quarantined[/] {shown(f.path)}: {n:,} line(s) "
                      f"{shown(reason.replace('_', ' '))}", highlight=False)
        if f.pending:
            err.print(f"[yellow]pending[/] {shown(f.path)}:{f.pending.line}: last line has no newline "
                      f"({f.pending.byte_length:,} bytes); it will be read once complete",
                      highlight=False)
        for w in f.warnings:
            err.print(f"[yellow]warning[/] {shown(f.path)}: {shown(w)}", highlight=False)
        if f.status == "skipped":
            err.print(f"[dim]skipped[/] {shown(f.path)}: {shown(f.skipped_reason)}",
                      highlight=False)
    hint = ('  (see them with: loophound sql "SELECT * FROM quarantine")'
            if report.quarantined else "")
    out.print(f"{report.events:,} events, {report.quarantined:,} quarantined lines "
              f"→ store {shown(store)}{hint}", highlight=False)


def open_store(store: Path) -> Store:
    s = Store(store)
    if not s.exists():
        fail(str(no_store(store)))
    return s


@contextmanager
def user_errors() -> Iterator[None]:
    """A user's mistake raised by the library becomes one line on stderr and its exit status
    (2); anything else is left to `run` (a bug)."""
    try:
        yield
    except UserError as exc:
        fail(str(exc), exc.exit_code)


FormatOpt = Annotated[str | None, typer.Option(
    "--format", "-f", help="Read every file of PATHs as this format (see `loophound formats`); a "
                           "file read before with another one is read again in its place.")]
MappingOpt = Annotated[Path | None, typer.Option(
    "--mapping", help="TOML file naming the fields of a JSONL format loophound does not know; "
                      "a file read before with another mapping is read again in its place.")]


def scan_store_cmd(paths: list[str], store: Path, config: Path | None, set_: list[str],
          prices: Path | None = None, cost_per_call: float | None = None, quiet: bool = False,
          incremental: bool = False, wait: bool = True, alert_on: str = "high",
          lookback_s: float = 3600.0, save_to: Path | None = None, fmt: str | None = None,
          mapping: Path | None = None, only: list[str] | None = None,
          show_ingest: bool = True):
    """`api.scan`, printing what ingest read (unless `quiet`, or `show_ingest` is False: the
    caller prints it after the verdict); errors become messages.
    Returns (ScanResult or None, IngestReport or None): None when `incremental` and nothing
    new arrived since the last scan."""
    from .. import api

    ingested: list[IngestReport] = []

    def on_wait() -> None:
        err.print(f"waiting: another loophound process is writing to {shown(store)} ...",
                  highlight=False)

    def on_ingest(report: IngestReport) -> None:
        ingested.append(report)
        if not quiet and show_ingest:
            print_ingest_report(report, store)

    phases = Phases(quiet)
    with user_errors():
        result = api.scan(store, paths, config=config, settings=set_ or [], prices=prices,
                          cost_per_call=cost_per_call, save_to=save_to, wait=wait,
                          on_wait=on_wait, on_ingest=on_ingest, incremental=incremental,
                          alert_on=alert_on, lookback=dt.timedelta(seconds=lookback_s),
                          format=fmt, mapping=load_mapping_file(mapping), only=only,
                          step=phases.step, on_progress=phases.on_progress)
    if result is not None and result.saved_in is not None and not quiet:
        err.print(f"findings saved in {shown(result.saved_in)} (the store "
                  f"{shown(store)} is read-only evidence and was not changed); "
                  f"`loophound report --store {shown(store)} --findings-dir "
                  f"{shown(result.saved_in)}` reports them", highlight=False)
    return result, (ingested[0] if ingested else None)


ConfigOpt = Annotated[Path | None, typer.Option("--config", "-c", help="TOML file of detector "
                                                "settings, e.g. [repeated_error] min_count = 20.")]


SetOpt = Annotated[list[str] | None, typer.Option("--set", help="Override one setting: "
                                                  "DETECTOR.PARAM=VALUE (repeatable).")]


PricesOpt = Annotated[Path | None, typer.Option("--prices", help="TOML price table (model → $ per "
                                                "million input/output tokens) over the shipped one.")]


CallCostOpt = Annotated[float | None, typer.Option(
    "--cost-per-call", help="Assumed USD per agent call for logs without tokens (bproxy requests, "
                            "sven messages); negative to leave them unpriced. Default 0.002.")]


FindingsDirOpt = Annotated[Path | None, typer.Option(
    "--findings-dir", help="Keep this scan's findings (a saved run) in this folder instead of "
                           "the store; the default for a store that may not be written is a new "
                           "temporary folder.")]


FindingsListOpt = Annotated[bool, typer.Option(
    "--findings", help="Also list every finding (several detectors may see one loop: the "
                       "incidents group them).")]


AlertsOpt = Annotated[Path | None, typer.Option("--alerts", help="Append alerts (JSON lines) "
                                                "to this file instead of standard output.")]


WebhookOpt = Annotated[str | None, typer.Option("--webhook", help="POST each alert as JSON to "
                                                "this URL.")]


AlertOnOpt = Annotated[str, typer.Option("--alert-on", help="Least severity that alerts: low, "
                                         "medium, high, critical.")]


LookbackOpt = Annotated[str, typer.Option(
    "--lookback", help="With --incremental: detectors read the events since the last scan's "
                       "latest one minus this much (30m, 1h, 6h); a loop still going on "
                       "continues its finding.")]


NoWaitOpt = Annotated[bool, typer.Option("--no-wait", help="Exit at once (status 2) if another "
                                         "loophound process is writing to the store.")]


SEVERITY_STYLE = {"critical": "bold red", "high": "red", "medium": "yellow", "low": "dim"}


VERDICT_STYLE = {"findings": "bold red", "clean": "bold green", "could not judge": "bold yellow"}


def print_summary(doc: dict, findings: bool = False, ingested: IngestReport | None = None,
                  store: Path | None = None) -> None:
    """What a scan found, verdict first (`findings_json.verdict`, the report's first words
    too); then what ingest read (`ingested`), its incidents (one per loop), and with
    `findings` every finding behind them."""
    from ..findings_json import verdict

    word, said = verdict(doc)
    out.print(f"[{VERDICT_STYLE[word]}]{word}:[/] {shown(said)}", highlight=False)
    if ingested is not None:
        print_ingest_report(ingested, store or Path(DEFAULT_STORE))
    if doc["findings"]:
        print_incidents(doc, hint=not findings)
    if findings or not doc["findings"]:
        print_findings(doc)


def _loops_table(columns: tuple[str, ...], rows: list[list[str]]) -> None:
    """Incidents or findings as a table, their counts and costs right-aligned."""
    table = Table(show_edge=False, header_style="bold", show_lines=False)
    for col in columns:
        table.add_column(col, justify="right" if col in ("events", "cost") else "left",
                         overflow="fold")
    for row in rows:
        table.add_row(*row)
    out.print(table)


def _loop_row(x: dict, second: str, third: str) -> list[str]:
    """An incident's or a finding's row: its severity, two texts (already shown inert), its
    events, span and cost."""
    cost = "-" if x["cost_usd"] is None else f"${x['cost_usd']:,.2f}"
    return [f"[{SEVERITY_STYLE[x['severity']]}]{x['severity']}[/]", second, third,
            f"{x['events']:,}", shown((x["start"] or "")[:19]), shown((x["end"] or "")[:19]), cost]


def _whole_log(doc: dict) -> str:
    t = doc["totals"]
    cost = "unpriced" if t["cost_usd"] is None else f"${t['cost_usd']:,.2f}"
    return f"{t['events']:,} events; estimated cost of the whole log {cost}"


def print_incidents(doc: dict, hint: bool = True) -> None:
    """The incidents as a table, one row per loop, with the detectors that saw it; titles
    name actors and targets from the logs, shown inert."""
    from ..findings_json import incidents_in, runaway

    incidents = incidents_in(doc)
    rows = []
    for inc in sorted(incidents, key=lambda i: not runaway(i)):  # unusual ones last
        seen = ", ".join(dict.fromkeys(s["detector"] for s in inc["signals"])) or "-"
        broken = (f" (interrupted {inc['interruptions']:,}×)" if inc.get("interruptions")
                  else "")
        tag = "" if runaway(inc) else "unusual, not a runaway loop: "
        rows.append(_loop_row(inc, tag + shown(inc["title"]) + broken, shown(seen)))
    _loops_table(("severity", "incident", "also seen as", "events", "from", "to", "cost"), rows)
    sev = ", ".join(f"{n} {s}" for s in reversed(SEVERITIES)
                    if (n := sum(1 for i in incidents if i["severity"] == s)))
    out.print(f"{len(incidents)} incident(s) ({sev}) from {len(doc['findings'])} finding(s) over "
              + _whole_log(doc) + ("; --findings lists every finding"
                                   if hint and len(incidents) < len(doc["findings"]) else ""),
              highlight=False)


def print_findings(doc: dict) -> None:
    """The findings as a table: titles name actors and targets from the logs, shown inert."""
    findings = doc["findings"]
    if not findings:
        print_verdict(doc)
        return
    _loops_table(("severity", "detector", "finding", "events", "from", "to", "cost"),
                 [_loop_row(f, shown(f["detector"]), shown(f["title"])) for f in findings])
    out.print(f"{len(findings)} finding(s) over " + _whole_log(doc), highlight=False)
    print_unjudged(doc.get("coverage") or {})  # findings elsewhere say nothing of these


def refuse_evidence(store: Path | None, paths: list[str] | None,
                    outputs: dict[str, Path | None]) -> None:
    """Before any work: each output given (option name → path) checked against the store,
    its logs and `paths` (`outputs.check_output`); a path that is evidence ends the command
    with what to do (exit 2)."""
    from ..outputs import check_output

    given = {option: p for option, p in outputs.items() if p is not None}
    if not given:
        return
    with user_errors():
        for option, target in given.items():
            check_output(target, option, Store(store) if store is not None else None,
                         paths or [])


def write_json(doc: dict, json_out: Path | None) -> None:
    """The document to standard output (-) or to a file, written whole or not at all."""
    from ..findings_json import dumps
    from ..outputs import write_atomically

    if json_out is None:
        return
    if str(json_out) == "-":  # the same JSON, with nothing in it that acts on a terminal
        sys.stdout.write(json_inert(dumps(doc)))
    else:
        write_atomically(json_out, dumps(doc))


def incremental_scan(paths: list[str], store: Path, fail_on: str, alerts: Path | None,
                     webhook: str | None, alert_on: str, wait: bool, config: Path | None,
                     set_: list[str], prices: Path | None, cost_per_call: float | None,
                     json_out: Path | None = None, lookback_s: float = 3600.0,
                     quiet: bool = False) -> int:
    """One scheduled scan: new bytes only, alerts only for new or escalated findings.
    Nothing new prints nothing (cron mails whatever a job prints); `quiet` leaves out the
    tally line too, so only alerts are printed. Returns the exit status."""
    import json as _json

    from ..watch import post_webhook

    refuse_evidence(store, paths, {"--json": json_out, "--alerts": alerts})
    result, report = scan_store_cmd(paths, store, config, set_, prices, cost_per_call,
                                    quiet=quiet, incremental=True, wait=wait,
                                    alert_on=alert_on, lookback_s=lookback_s, show_ingest=False)
    new = f"{report.events:,} new events" if report else "no inputs named"
    if result is None:  # nothing arrived since the last scan: nothing to say
        return 0
    write_json(result.document, json_out)
    def tally(statuses: dict[str, str]) -> str:
        counts = {k: sum(1 for v in statuses.values() if v == k)
                  for k in ("new", "escalated", "growing", "ongoing", "ended")}
        return ", ".join(f"{v} {k}" for k, v in counts.items() if v)

    if not quiet:
        err.print(f"{new}; incidents: {tally(result.tracked.incidents)}; findings: "
                  f"{tally(result.tracked.statuses)}", highlight=False)
    lines = [_json.dumps(a, sort_keys=True) for a in result.tracked.alerts]
    if alerts is not None:
        with alerts.open("a", encoding="utf-8") as fh:
            fh.writelines(line + "\n" for line in lines)
    else:
        for line in lines:
            sys.stdout.write(line + "\n")
    for a in result.tracked.alerts if webhook else []:
        problem = post_webhook(webhook, a)
        if problem:
            err.print(f"[yellow]warning[/] {shown(problem)}", highlight=False)
    if fail_on == "never":
        return 0
    floor = SEVERITIES.index(fail_on)  # a loop that ended is news, not a failure
    return int(any(SEVERITIES.index(a["severity"]) >= floor for a in result.tracked.alerts
                   if a["status"] != "ended"))


def exit_status(doc: dict, fail_on: str) -> int:
    """0 clean (or nothing at or above `fail_on`), 1 a finding at or above it, 4 no finding
    but an inconclusive verdict (some log could not be judged: never an all-clear)."""
    inconclusive = (doc.get("coverage") or {}).get("verdict") == Verdict.INCONCLUSIVE
    if fail_on == "never":
        return 0
    from ..findings_json import incidents_in

    floor = SEVERITIES.index(fail_on)  # an incident may be more severe than its findings
    if any(SEVERITIES.index(i["severity"]) >= floor for i in incidents_in(doc)):
        return 1
    return INCONCLUSIVE_EXIT if inconclusive and not doc["findings"] else 0


INCONCLUSIVE_EXIT = 4


def print_verdict(doc: dict) -> None:
    """No finding (the verdict line above said clean or could not judge): what could not be
    judged, naming the logs, the missing fields, the keys a mapping could use, and the
    skipped files."""
    print_unjudged(doc.get("coverage") or {})


def print_unjudged(cov: dict) -> None:
    """The logs a scan could not judge and the files it did not read, each with what to do."""
    for i in cov.get("inputs", []):
        if i["judged"]:
            continue
        keys = ", ".join(i.get("unmapped_keys") or []) or "none seen"
        out.print(f"  {escape(inert(i['path']))} ({i['format']}, {i['events']:,} events): "
                  f"missing {escape(inert('; '.join(i['missing'])))}. Its lines' fields: "
                  f"{escape(inert(keys))}: name them in a --mapping file "
                  + escape('([fields] actor = "...", session = "...", error = "...")'),
                  highlight=False)
    for s in cov.get("skipped", []):
        out.print(f"  not read: {escape(inert(s['path']))}: {escape(inert(s['reason']))}",
                  highlight=False)
