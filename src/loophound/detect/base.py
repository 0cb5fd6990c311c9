"""What a detector is and what it returns.

A detector reads the store's views and returns `Finding`s: who looped, how, from when to when,
which events it claims, and why it thinks so. Detectors do not count bytes, tokens or dollars:
`loophound.attribute` does that once, the same way for every finding, from the claimed events.

Each detector is three steps, composed by `staged` into its `run`:

- `measure(con, params) -> list[M]`: the numbers (counts, times, participants, the lines to
  show), one measurement dataclass per candidate; the logic over rows lives in pure functions
  with unit tests that need no store;
- `judge(m, params) -> Severity | None`: the severity from the thresholds the `Params` declare
  (None: not a finding after all);
- `describe(m, severity, params) -> Finding`: title, summary, recommendation, details.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import duckdb

from ..vocabulary import SEVERITIES as SEVERITIES  # re-exported: the words live in vocabulary
from ..vocabulary import EventKind, Severity


def severity_rank(severity: str) -> int:
    """0 for low ... 3 for critical; a word that is not a severity raises ValueError."""
    return Severity(severity).rank


@dataclass(frozen=True)
class EvidenceLine:
    """A line of a log a reader should look at, and why."""

    file: str
    line: int
    note: str

    def as_dict(self) -> dict[str, Any]:
        return {"file": self.file, "line": self.line, "note": self.note}


@dataclass
class Finding:
    detector: str
    key: str  # what makes this finding itself across runs (participants + where it began)
    severity: str
    title: str
    summary: str
    recommendation: str
    start: Any  # datetime (UTC, naive)
    end: Any
    actors: list[str] = field(default_factory=list)
    targets: list[str] = field(default_factory=list)
    sessions: list[str] = field(default_factory=list)
    # SQL (over the views) selecting the event_id of every line this finding claims, with its
    # parameters; attribution adds the answer lines of claimed requests, then counts, sizes
    # and prices from them.
    claim_sql: str = ""
    claim_params: dict[str, Any] = field(default_factory=dict)
    # which claimed kinds are the "runaway actions" a user counts (requests, not their responses)
    unit_kinds: tuple[str, ...] = ("request",)
    details: dict[str, Any] = field(default_factory=dict)
    # the detector's own picks, shown first; attribution adds the first and last claimed lines
    evidence: list[EvidenceLine] = field(default_factory=list)
    evidence_limit: int = 5
    # how it reads as a corroborating signal of a loop another finding describes best
    # ("a rate spike 98× its baseline"): the incident's "also seen as"; default: the title
    signal: str = ""

    def __post_init__(self) -> None:
        # one of the vocabulary's words, kept as the plain string the JSON and Parquet hold
        self.severity = Severity(self.severity).value
        for kind in self.unit_kinds:
            EventKind(kind)

    @property
    def id(self) -> str:
        return hashlib.sha256(f"{self.detector}\x1f{self.key}".encode()).hexdigest()[:16]


# The `Detector.lane` of the stuck detectors (repeated_action, alternating_action): they share
# one pass over the actions (`actions.want`), so they run one after the other on one connection.
ONE_PASS_OVER_ACTIONS = "one pass over the actions"


@dataclass(frozen=True)
class Detector:
    name: str
    description: str
    params: type  # a dataclass whose fields (with defaults and `doc` metadata) are the knobs
    run: Callable[[duckdb.DuckDBPyConnection, Any], list[Finding]]
    # when two findings claim one event, the lower rank explains it best
    rank: int = 50
    # the most severe finding it can report: scheduled scans skip detectors that cannot reach
    # the alert threshold
    max_severity: str = "critical"
    # the event kinds it reads: it is skipped when the store holds none of them (a bproxy log
    # has no messages to ping-pong), which saves a scan per detector; empty means always run
    reads: tuple[str, ...] = ()
    # what an event of those kinds must carry for it to judge it: every group, one column of
    # each (coverage.py counts the events a detector could judge; none means "not judged")
    needs: tuple[tuple[str, ...], ...] = (("ts",),)
    # what its findings are about, for the report's pictures (report/model.py SHAPE_EXTRAS):
    # `events` (a rate over time), `pair` (two parties exchanging messages: a sequence),
    # `cycle` (agents triggering each other in a ring: a graph)
    shape: str = "events"
    # the event columns whose groups hold everything a finding of it is reasoned from: no
    # measurement relates events of two groups (events with NULL there are one group). The
    # Spark engine runs it, unchanged, on each group apart (loophound.spark.scan), and
    # takes one that declares none for a bug (every registered one declares one: a step
    # over all events is a `gather`, below). A coarser grouping is always as exact;
    # tests/test_spark.py checks the findings are the same
    partition_by: tuple[str, ...] = ()
    # with partition_by ("format",), for a detector that relates events by names and ids a
    # format does not own (an actor named in two formats' logs is one actor to it): SQL over
    # the views giving (format, link) rows, every value through which it relates two events.
    # Formats that share a link (directly or through others) are one group on the Spark
    # engine, so the grouping stays exact whatever the logs name
    links: str = ""
    # work it can start before any detector runs, to go on beside them or to be shared with
    # them (repeated_action and alternating_action ask for one pass over the actions):
    # called with the connection and its params
    prepare: Callable[[duckdb.DuckDBPyConnection, Any], None] | None = None
    # detectors run side by side, each on a connection of its own; those of one `lane` (a
    # name) run one after the other on one, because one uses what another prepared there
    # (repeated_action and alternating_action share one pass over the actions)
    lane: str = ""
    # its memory grows with the log: repeated_error and the stuck detectors hold a storm's
    # attempts or actions in Python, unusual_actor has DuckDB sort every unit event (each
    # about 0.4-0.45 GB at 10x the incident). On a large log such detectors run one after
    # the other (`detect.SIDE_BY_SIDE_EVENTS`), as side by side their memory adds up
    grows_with_log: bool = False
    # a detector with a global step (unusual_actor fits one forest over every actor's
    # windows) is two steps, `gathered(parts, gather)` its `run`: `parts(con, params)`
    # measures what it can in each `partition_by` group (a list of picklable measurements),
    # `gather(con, parts, params)` judges the parts of every group together, with a
    # connection to all events for evidence lines. The default engine runs one after the
    # other over all events; the Spark engine runs `parts` on the executors and `gather` on
    # the driver. `gather` must not depend on the order the parts come in
    parts: Callable[[duckdb.DuckDBPyConnection, Any], list[Any]] | None = None
    gather: Callable[[duckdb.DuckDBPyConnection, list[Any], Any], list[Finding]] | None = None

    def has_to_read(self, present: set[str]) -> bool:
        """Whether events of the kinds `present` give it anything to read (`reads`)."""
        return not self.reads or bool(present.intersection(self.reads))

    def __post_init__(self) -> None:
        Severity(self.max_severity)  # a word that is not a severity or an event kind is a bug
        for kind in self.reads:
            EventKind(kind)
        if (self.parts is None) != (self.gather is None):
            raise ValueError(f"{self.name}: `parts` and `gather` go together")
        if self.links and self.partition_by != ("format",):
            raise ValueError(f"{self.name}: `links` ties formats: partition_by is ('format',)")


def staged(measure: Callable[[duckdb.DuckDBPyConnection, Any], list[Any]],
           judge: Callable[[Any, Any], Severity | None],
           describe: Callable[[Any, Severity, Any], Finding],
           order: Callable[[Finding], Any] | None = None,
           ) -> Callable[[duckdb.DuckDBPyConnection, Any], list[Finding]]:
    """A detector's `run`: measure, judge each measurement, describe the ones that are
    findings (in measurement order, or sorted by `order`)."""

    def run(con: duckdb.DuckDBPyConnection, params: Any) -> list[Finding]:
        return judged(measure(con, params), judge, describe, params, order)

    return run


def judged(measurements: list[Any], judge: Callable[[Any, Any], Severity | None],
           describe: Callable[[Any, Severity, Any], Finding], params: Any,
           order: Callable[[Finding], Any] | None = None) -> list[Finding]:
    """The findings among `measurements`: judged, and described when they are findings (in
    measurement order, or sorted by `order`)."""
    findings = []
    for m in measurements:
        severity = judge(m, params)
        if severity is not None:
            findings.append(describe(m, severity, params))
    return sorted(findings, key=order) if order else findings


def gathered(parts: Callable[[duckdb.DuckDBPyConnection, Any], list[Any]],
             gather: Callable[[duckdb.DuckDBPyConnection, list[Any], Any], list[Finding]],
             ) -> Callable[[duckdb.DuckDBPyConnection, Any], list[Finding]]:
    """A two-step detector's `run` on one machine (see `Detector.parts`): the parts of all
    events, gathered at once."""

    def run(con: duckdb.DuckDBPyConnection, params: Any) -> list[Finding]:
        return gather(con, parts(con, params), params)

    return run


def param(default: Any, doc: str) -> Any:
    """A documented detector parameter."""
    return field(default=default, metadata={"doc": doc})


def param_docs(params_cls: type) -> list[tuple[str, Any, str]]:
    return [(f.name, f.default, f.metadata.get("doc", "")) for f in dataclasses.fields(params_cls)]


def human_duration(seconds: float) -> str:
    """`45 s`, `12 min`, `17.1 h`: durations as a person says them."""
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def claim_units(units_filter: str) -> str:
    """Claim SQL: the unit events that `units_filter` (a condition over `e`, with $start and
    $stop bound) selects. Attribution adds the response and lifecycle lines of the claimed
    requests: a request and its answer are one action, and the loop's log bytes include both."""
    return f"SELECT e.event_id FROM events e WHERE e.ts BETWEEN $start AND $stop AND {units_filter}"
