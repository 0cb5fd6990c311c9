"""loophound as a library: the use cases the CLI is a thin shell over.

    import loophound

    store = loophound.ingest(["logs/"], store="evidence")        # read logs into a store
    result = loophound.scan("evidence")                          # detect, attribute, save a run
    loophound.write_report("evidence", "incident.html")         # the report of the saved run
    ev = loophound.open("evidence")
    ev.events().filter(pl.col("error").is_not_null()).collect()  # polars, lazily over Parquet

Every function raises `loophound.errors.UserError` (a subclass says which) for what a user can
fix; the CLI turns those into one-line messages and exit status 2.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import math
import os
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .errors import ConfigError, NotALog, no_store
from .ingest import IngestOptions, IngestReport
from .ingest import ingest as _ingest
from .outputs import check_output
from .runs import SavedRun, is_current, load_run, open_run
from .store import DEFAULT_STORE, Store

if TYPE_CHECKING:
    import polars as pl

    from .guards import Spec, Sweep
    from .scan import ScanResult

PathLike = str | os.PathLike


def _store(store: PathLike | Store) -> Store:
    return store if isinstance(store, Store) else Store(store)


def _existing(store: PathLike | Store) -> Store:
    s = _store(store)
    if not s.exists():
        raise no_store(s.root)
    return s


@dataclass
class Evidence:
    """An opened store, for analysis: its tables as polars LazyFrames over the Parquet files
    (nothing is read until `collect()`), its saved runs, and SQL over its views."""

    store: Store

    def _frame(self, kind: str) -> pl.LazyFrame:
        import polars as pl

        from .schema import COLUMNS, QUARANTINE_COLUMNS

        files = self.store.committed_files()[kind]
        if files:
            return pl.scan_parquet(files, missing_columns="insert", extra_columns="ignore")
        columns = COLUMNS if kind == "events" else QUARANTINE_COLUMNS
        return pl.DataFrame({c.name: [] for c in columns}).lazy()

    def events(self) -> pl.LazyFrame:
        """Every committed event (the `events` view's columns; see the README's table)."""
        return self._frame("events")

    def quarantine(self) -> pl.LazyFrame:
        """Every line that did not become an event, with file, line and reason."""
        return self._frame("quarantine")

    def last_run(self) -> SavedRun | None:
        """The newest saved scan of this store, or None."""
        return load_run(self.store)

    def findings(self) -> pl.LazyFrame:
        """The findings of the newest saved scan (empty before any)."""
        import polars as pl

        run = self.last_run()
        path = run.path("findings") if run else None
        if path is None:
            return pl.DataFrame({"id": [], "detector": [], "severity": []},
                                schema={"id": pl.String, "detector": pl.String,
                                        "severity": pl.String}).lazy()
        return pl.scan_parquet(path)

    def sql(self, query: str, params: dict[str, Any] | None = None):
        """Run one read-only query over the store's views; returns a DuckDB relation
        (`.pl()`, `.df()`, `.fetchall()`). Parameters are bound, never pasted."""
        from .queries import check_read_only, readonly_connection

        check_read_only(query)
        return readonly_connection(self.store).sql(query, params=params)


def open(path: PathLike = DEFAULT_STORE) -> Evidence:  # noqa: A001 — loophound.open(path)
    """Open the store at `path` for reading (a copy of its Parquet folders works too)."""
    return Evidence(_existing(path))


def ingest(paths: Iterable[str], store: PathLike | Store = DEFAULT_STORE, *,
           format: str | None = None, mapping: dict | None = None,  # noqa: A002
           max_line_bytes: int = 16 * 1024 * 1024, wait: bool = True,
           on_progress: Callable[[int, int], None] | None = None,
           on_wait: Callable[[], None] | None = None) -> IngestReport:
    """Read `paths` (files, folders, globs) into `store`; see `loophound ingest`."""
    options = IngestOptions(format=format, mapping=mapping, max_line_bytes=max_line_bytes,
                            wait=wait)
    return _ingest(list(paths), _store(store), options, on_progress, on_wait)


READS = ("loophound reads agent and daemon logs in the formats `loophound formats` lists "
         "(JSON lines, OTLP JSON, transcripts and trajectories); a JSON-lines log of another "
         "shape is read with a --mapping file naming its fields")


def refuse_non_logs(report: IngestReport, paths: Sequence[str]) -> None:
    """Raise `NotALog` (exit 2) when nothing `paths` named is a log loophound reads: no file
    at all, or every file passed over. A scan of them would be an empty report that says
    nothing was found, of inputs that were never looked at."""
    if any(f.status != "skipped" for f in report.files):
        return
    named = ", ".join(str(p) for p in paths)
    if not report.files:
        raise NotALog(f"no log files in {named}: nothing to read. {READS}")
    shown = [f"{f.path} ({looks_like(f.path)})" for f in report.files[:5]]
    more = f" and {len(report.files) - 5:,} more" if len(report.files) > 5 else ""
    raise NotALog(f"nothing in {named} is a log loophound reads: {'; '.join(shown)}{more}. "
                  f"{READS}")


def looks_like(path: PathLike) -> str:
    """What a file passed over looks like, from its first 4 KiB (read, never changed)."""
    try:
        with Path(path).open("rb") as fh:
            head = fh.read(4096)
    except OSError as exc:
        return f"unreadable: {exc.strerror or exc}"
    if not head.strip():
        return "empty"
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    if text is None or "\0" in text:
        return "a binary file, not text"
    lines = text.lstrip().split("\n")
    if lines[0].startswith(("{", "[")):
        return "JSON of no shape loophound knows: describe it with --mapping"
    if len(lines) > 1 and any(lines[0].count(sep) >= 2 and lines[1].count(sep) == lines[0].count(sep)
                              for sep in ",;\t"):
        return "a table (CSV or TSV), not a log of events"
    return "plain text in no format loophound knows"


def cost_model(prices: PathLike | None = None, cost_per_call: float | None = None):
    """The price table (shipped, extended by `prices`) and the assumed cost of a call
    without tokens (None: the default; negative: leave such calls unpriced)."""
    from .attribute.costs import DEFAULT_COST_PER_CALL, load_cost_model

    if cost_per_call is not None and not math.isfinite(cost_per_call):
        raise ConfigError(f"--cost-per-call {cost_per_call}: give a number of US dollars, e.g. "
                          "0.002 (negative: leave calls without tokens unpriced)")
    per_call = DEFAULT_COST_PER_CALL if cost_per_call is None else (
        cost_per_call if cost_per_call >= 0 else None)
    try:
        return load_cost_model(Path(prices) if prices else None, per_call)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def scan(store: PathLike | Store = DEFAULT_STORE, paths: Sequence[str] = (), *,
         config: PathLike | None = None, settings: Sequence[str] = (),
         prices: PathLike | None = None, cost_per_call: float | None = None,
         save: bool = True, save_to: PathLike | None = None, wait: bool = True,
         on_wait: Callable[[], None] | None = None,
         on_ingest: Callable[[IngestReport], None] | None = None,
         incremental: bool = False, alert_on: str = "high",
         lookback: dt.timedelta = dt.timedelta(hours=1), format: str | None = None,  # noqa: A002
         mapping: dict | None = None, only: Sequence[str] | None = None,
         for_report: bool = False, step: Callable[[str], Any] | None = None,
         on_progress: Callable[[int, int], None] | None = None) -> ScanResult | None:
    """Ingest `paths` (if any), then detect and attribute, and save the run: in the store,
    or, for a store that may not be written, in `save_to` (default a new temporary folder;
    `result.saved_in` says where). A store being written by another process is waited for.

    `incremental` (scheduled scans): read new bytes only and detect over the recent window;
    returns None when nothing arrived since the last scan. `only`: these detectors only.
    `for_report`: the result's connection will make a report (`scan_store`). `step(name)`:
    a context manager around each phase (reading the logs, detecting), for progress;
    `on_progress(done, total)`: bytes read so far."""
    from contextlib import nullcontext

    from .scan import scan_store

    step = step or (lambda _text: nullcontext())
    only = _detector_names(only)
    check_settings(config, settings)
    s = _store(store)
    if save_to is not None:
        check_output(save_to, "--findings-dir", s, paths)
    costs = cost_model(prices, cost_per_call)
    config_path = Path(config) if config else None
    if not paths and not incremental and (s.read_only or save_to is not None or not save):
        # nothing to write in the store: no lock, so a copy or a busy store can be scanned
        existing = _existing(s)
        with step(DETECTING):
            return scan_store(existing, config_path, list(settings), costs, only=only,
                              save=save, save_to=Path(save_to) if save_to else None,
                              for_report=for_report)
    if not paths:
        _existing(s)  # a scan of no logs in a folder with no store creates none
    with s.writing(wait=wait, on_wait=on_wait, hold_catalog=incremental):
        if paths:
            with step(READING):
                report = ingest(paths, s, format=format, mapping=mapping, wait=wait,
                                on_progress=on_progress, on_wait=on_wait)
            if not incremental:  # a scheduled scan's folder may hold no log yet
                refuse_non_logs(report, paths)
            if on_ingest:
                on_ingest(report)
        s = _existing(s)
        if incremental and not s.has_unseen_batches():  # none since the last scan
            return None
        with step(DETECTING):
            return scan_store(s, config_path, list(settings), costs, only=only,
                              alert_on=alert_on, lookback=lookback if incremental else None,
                              save=save, save_to=Path(save_to) if save_to else None,
                              for_report=for_report)


# the phases a long command names on a terminal (`step`)
READING = "reading the logs"
DETECTING = "detecting loops and attributing cost"
REPORTING = "writing the report"


MAX_INT_SETTING = 2**31 - 1  # what a DuckDB INTEGER, which queries bind them as, holds


def check_settings(config: PathLike | None = None, settings: Sequence[str] = ()) -> None:
    """Refuse, before any work, a detector setting (from the `config` TOML file or a
    `--set`) that the detectors cannot use: a value of another type than its default's
    (a list, a table, a string, 1.5 for a count), a number that is not finite, negative
    where the default is not, zero for a count whose default is positive, or beyond what
    DuckDB's integers hold. Each raises `ConfigError` naming the key and the default: a
    detector given such a value failed half way through a scan, as a bug."""
    import tomllib

    from .detect import DETECTORS
    from .detect import settings as load
    from .detect.base import param_docs

    if config is not None:
        try:
            layers = tomllib.loads(Path(config).read_text())
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
            raise ConfigError(f"cannot read config {config}: {exc}") from None
        for name, table in layers.items():
            if not isinstance(table, dict):
                raise ConfigError(f"{config}: `{name}` must be a table of settings: write "
                                  f"[{name}] and then PARAM = VALUE lines")
    try:
        loaded = load(Path(config) if config else None, list(settings))
    except (TypeError, ValueError, OverflowError) as exc:
        raise ConfigError(f"a detector setting cannot be read: {exc}") from None
    for name, params in loaded.items():
        for key, default, _ in param_docs(DETECTORS[name].params):
            value = getattr(params, key)
            problem = _setting_problem(value, default)
            if problem:
                raise ConfigError(f"setting {name}.{key} = {value!r}: {problem} (the default is "
                                  f"{default!r}); fix it in --config or --set")


def _setting_problem(value: Any, default: Any) -> str | None:
    """What is wrong with `value` for a parameter whose default is `default` (None: nothing)."""
    if isinstance(default, bool):
        return None if isinstance(value, bool) else "must be true or false"
    if isinstance(default, (int, float)):
        whole = isinstance(default, int)
        if isinstance(value, bool) or not isinstance(value, int if whole else (int, float)):
            return "must be a whole number" if whole else "must be a number"
        if not math.isfinite(value):
            return "must be a finite number"
        least = 1 if whole and default > 0 else 0 if default >= 0 else default
        if value < least:
            return f"must be at least {least}"
        if abs(value) > MAX_INT_SETTING:
            return f"must be at most {MAX_INT_SETTING:,}"
        return None
    if isinstance(default, str):
        return None if isinstance(value, str) else "must be a string"
    if isinstance(default, (list, tuple)):
        ok = isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value)
        return None if ok else "must be a list of strings"
    return None


def _detector_names(only: Sequence[str] | None) -> list[str] | None:
    """`only`, checked against the detectors (None: all of them)."""
    if not only:
        return None
    from .detect import DETECTORS

    unknown = [n for n in only if n not in DETECTORS]
    if unknown:
        raise ConfigError(f"no detector named {', '.join(unknown)}; detectors: "
                          f"{', '.join(DETECTORS)}")
    return list(only)


@dataclass
class ReportResult:
    path: Path
    bytes: int
    document: dict
    source: str  # what the report was made from, in words


def write_report(store: PathLike | Store = DEFAULT_STORE, out: PathLike = "reports/incident.html",
                 *,
           generated_at: dt.datetime | str | None = None, run_folder: PathLike | None = None,
           config: PathLike | None = None, settings: Sequence[str] = (),
           prices: PathLike | None = None, cost_per_call: float | None = None) -> ReportResult:
    """Write the HTML report of `store`'s newest saved run (or of the run in `run_folder`).
    Takes no lock and writes nothing in the store. With detector or cost settings, or when
    no saved run covers everything the store holds, it scans in memory first (and says so)."""
    from .report import build, write

    s = _existing(store)
    check_output(out, "--out", s)
    run = load_run(s, Path(run_folder) if run_folder else None)
    custom = bool(config or settings or prices or cost_per_call is not None)
    if run is not None and run.full and not custom and (run_folder or is_current(s, run)):
        opened = open_run(s, run)
        source = f"saved run {run.number} ({run.folder})"
    else:
        opened = scan(s, config=config, settings=settings, prices=prices,
                      cost_per_call=cost_per_call, save=False, for_report=True)
        why = ("with the settings given" if custom else
               "no saved scan" if run is None or not run.full else
               "the saved scan predates batches ingested since")
        source = f"a scan in memory ({why}; nothing written to the store)"
    out = report_path(out)
    try:
        size = write(build(opened, generated_at), out)
    finally:
        opened.con.close()
    return ReportResult(out, size, opened.document, source)


@dataclass
class Investigation:
    report: ReportResult
    ingest: IngestReport | None
    scan: ScanResult
    guards: dict | None = None  # the loophound.guards/v1 replay, when guards were named


def investigate(paths: Sequence[str], out: PathLike = "reports/incident.html", *,
                store: PathLike | None = None, generated_at: dt.datetime | str | None = None,
                config: PathLike | None = None, settings: Sequence[str] = (),
                prices: PathLike | None = None, cost_per_call: float | None = None,
                on_ingest: Callable[[IngestReport], None] | None = None,
                step: Callable[[str], Any] | None = None, format: str | None = None,  # noqa: A002
                mapping: dict | None = None, spec: PathLike | None = None,
                presets: Sequence[str] = (), sweep: str | None = None,
                on_progress: Callable[[int, int], None] | None = None) -> Investigation:
    """Ingest, scan and report in one go. Without `store`, a temporary store holds exactly
    `paths` and is removed at the end, and the run is kept in memory only (the guards
    document's `log.run` is then null): saving it there was written to be deleted unread
    (0.5 s of 6.6 s on the 309 MB `reqId` log). With a `store`, the run is saved in it;
    with a `store` and no `paths`, the store as it is.
    With guards (a `spec` file and/or `presets`, optionally a `sweep`, as `guards` takes
    them) they are replayed over this scan and the report has the section "What would have
    stopped it"; the guards are checked before any log is read."""
    from contextlib import nullcontext

    from .report import build, write

    check_output(out, "--out", Store(store) if store is not None else None, paths)
    check_settings(config, settings)  # before the logs are read, as the guards below
    cost_model(prices, cost_per_call)
    plan = _guard_plan(spec, presets, sweep) if spec or presets or sweep else None
    step = step or (lambda _text: nullcontext())
    out = report_path(out)
    ready = _in_background(_prepare_scan_and_report)
    tmp = None
    if store is None:
        tmp = Path(tempfile.mkdtemp(prefix="loophound-store-"))
        store = tmp
    try:
        ingested = None
        if paths:
            with step(READING):
                ingested = ingest(paths, store, format=format, mapping=mapping,
                                  on_progress=on_progress)
            refuse_non_logs(ingested, paths)
            if on_ingest:
                on_ingest(ingested)
        with step(DETECTING):
            result = scan(store, config=config, settings=settings, prices=prices,
                          cost_per_call=cost_per_call, for_report=True, save=tmp is None)
        replayed = None
        if plan is not None:
            with step("replaying the guards"):
                # the run saved in the store kept, or in the folder beside a read-only one
                saved = load_run(Store(store), result.saved_in) if tmp is None else None
                replayed = _replay(result, plan, saved.number if saved else None)
        with step(REPORTING):
            ready.join()
            size = write(build(result, generated_at, guards=replayed), out)
        where = result.saved_in or Store(store).root
        made = ReportResult(out, size, result.document, f"this scan (saved in {where})")
        result.con.close()
        return Investigation(made, ingested, result, replayed)
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


def report_path(out: PathLike) -> Path:
    """Where a report asked for at `out` goes: an existing folder gets `incident.html`
    inside it (writing over a folder is never what was meant)."""
    path = Path(out)
    return path / "incident.html" if path.is_dir() else path


def _prepare_scan_and_report() -> None:
    """What the scan and the report would otherwise start with, on the critical path:
    importing the scan (the detectors) and `report.prepare` (plotly, plotly.js)."""
    from .report import prepare
    from .scan import scan_store  # noqa: F401 — imported for what it imports

    prepare()


def _in_background(work: Callable[[], None]) -> threading.Thread:
    """`work` in a thread, started: reading logs and scanning leave one of two cores idle
    about a third of the time. A failure there is left for the same work done again in the
    foreground, where it is reported as any other. Not a daemon: a command that fails
    early waits for it (well under a second) rather than exit while it imports."""
    def run() -> None:
        with contextlib.suppress(Exception):
            work()

    thread = threading.Thread(target=run, name="loophound-prepare")
    thread.start()
    return thread


@dataclass
class GuardsResult:
    document: dict  # the loophound.guards/v1 object
    source: str  # the scan the guards were replayed over, in words
    report: ReportResult | None = None


def _guard_plan(spec: PathLike | None, presets: Sequence[str],
                sweep: str | None) -> tuple[Spec, Sweep | None]:
    """The guards named (a spec file and/or presets), combined and checked, and the sweep
    over one of their parameters: every mistake is found before any log is read."""
    from .guards import combine, load_spec, parse_sweep, preset_names, preset_spec

    specs = ([load_spec(spec)] if spec else []) + [preset_spec(p) for p in presets]
    if not specs:
        raise ConfigError("name the guards to replay: a spec file (TOML [[guard]] tables) or a "
                          f"preset; presets: {', '.join(preset_names())}")
    combined = combine(specs)
    return combined, parse_sweep(sweep, combined) if sweep else None


def _replay(opened: Any, plan: tuple[Spec, Sweep | None], run_number: int | None,
            on_guard: Callable[[str], Any] | None = None) -> dict:
    """The `loophound.guards/v1` document of `plan` over a scan (new or saved) that is open."""
    from .guards import run

    spec, swept = plan
    return run(opened.con, opened.document, opened.unit_kinds, spec, swept, run_number, on_guard)


def guards(store: PathLike | Store = DEFAULT_STORE, paths: Sequence[str] = (), *,
           spec: PathLike | None = None, presets: Sequence[str] = (), sweep: str | None = None,
           report: PathLike | None = None, generated_at: dt.datetime | str | None = None,
           on_guard: Callable[[str], Any] | None = None) -> GuardsResult:
    """Replay runtime guards (a `spec` TOML file and/or shipped `presets`) over the store's
    newest saved scan, in event time, and measure what each would have stopped: the
    `loophound.guards/v1` document. `paths` are ingested first; without a saved scan that
    covers everything the store holds, it scans first (saving the run where a scan would).
    `sweep` (`GUARD.PARAM=LO..HI`) replays one parameter over a range; `report` writes the
    HTML report with the section "What would have stopped it"."""
    plan = _guard_plan(spec, presets, sweep)
    s = _store(store)
    if report is not None:
        check_output(report, "--report", s, paths)
    if paths:
        ingest(paths, s)
    s = _existing(s)
    run = load_run(s)
    if run is not None and run.full and is_current(s, run):
        opened = open_run(s, run, tables=report is not None)  # the report needs its tables
        source, number = f"saved run {run.number} ({run.folder})", run.number
    else:
        opened = scan(s)
        where = opened.saved_in or s.root
        why = "no saved scan" if run is None or not run.full else \
            "the saved scan predates batches ingested since"
        saved = load_run(s, opened.saved_in)  # the run this scan saved
        source, number = f"a new scan ({why}; saved in {where})", saved.number if saved else None
    try:
        doc = _replay(opened, plan, number, on_guard)
        made = None
        if report is not None:
            from .report import build, write

            size = write(build(opened, generated_at, guards=doc), report_path(report))
            made = ReportResult(report_path(report), size, opened.document, source)
    finally:
        opened.con.close()
    return GuardsResult(doc, source, made)


@dataclass
class Verdict:
    path: str
    bytes: int
    sha256: str
    # same, changed, gone (inputs, and the store's committed files); no hash recorded (a store
    # file committed before hashes were recorded); readable, unreadable (a copy's files)
    verdict: str

    @property
    def ok(self) -> bool:
        """Nothing wrong: the same bytes, or nothing recorded to compare with."""
        return self.verdict in ("same", "no hash recorded", "readable")


def verify(store: PathLike | Store = DEFAULT_STORE) -> list[Verdict]:
    """Re-hash every input and compare with the SHA-256 recorded when it was read, then every
    Parquet file the catalog lists (each batch's, each saved run's) with the SHA-256 recorded
    when it was committed. A copy without a catalog has no record to compare with: each of its
    Parquet files is read whole and hashed, so the verdict says whether it is readable and the
    hash can be compared with the original's."""
    from .ingest import verify_inputs, verify_parquet_files, verify_store_files

    s = _existing(store)
    if s.is_bare:
        return [Verdict(*row) for row in verify_parquet_files(s)]
    return [Verdict(*row) for row in (*verify_inputs(s), *verify_store_files(s))]


__all__ = ["Evidence", "GuardsResult", "Investigation", "ReportResult", "Verdict", "cost_model",
           "guards", "ingest", "investigate", "looks_like", "open", "refuse_non_logs", "scan",
           "verify", "write_report"]
