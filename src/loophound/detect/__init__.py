"""The detectors, registered in one place, and the code that runs them with their settings.

Settings come from three layers, later ones winning: each detector's documented defaults, a
TOML file (`[repeated_error] min_count = 50`), and `--set repeated_error.min_count=50`.
"""

from __future__ import annotations

import dataclasses
import threading
import tomllib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import duckdb

from ..errors import ConfigError
from ..registry import present
from ..store import event_kinds, kind_counts, sibling_to_make
from .base import Detector, Finding, param_docs

_MODULES = (
    "repeated_error", "ping_pong", "trigger_cycle", "rate_spike", "unusual_actor",
    "depth_violation", "repair_loop", "repeated_action", "alternating_action", "repeated_message",
    "no_progress",
    "runaway_subagents",
)


def _load() -> dict[str, Detector]:
    return {m.DETECTOR.name: m.DETECTOR for m in present(__name__, _MODULES)}


DETECTORS: dict[str, Detector] = _load()


def _coerce(value: Any, default: Any, where: str) -> Any:
    if isinstance(value, str) and not isinstance(default, str):
        try:
            if isinstance(default, bool):
                if value.lower() not in ("true", "false", "1", "0", "yes", "no"):
                    raise ValueError(value)
                return value.lower() in ("true", "1", "yes")
            if isinstance(default, int):
                return int(value)
            if isinstance(default, float):
                return float(value)
            if isinstance(default, (list, tuple)):
                return type(default)(v.strip() for v in value.split(",") if v.strip())
        except ValueError:
            raise ConfigError(f"{where}: {value!r} is not a valid {type(default).__name__}") from None
    if isinstance(default, float) and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if isinstance(default, tuple) and isinstance(value, list):
        return tuple(value)
    return value


def settings(config_file: Path | None = None, overrides: list[str] = ()) -> dict[str, Any]:
    """Each detector's parameters after the TOML file and the --set overrides."""
    layers: dict[str, dict[str, Any]] = {}
    if config_file is not None:
        try:
            layers = tomllib.loads(Path(config_file).read_text())
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise ConfigError(f"cannot read config {config_file}: {exc}") from None
    for item in overrides:
        name, _, value = item.partition("=")
        det, _, key = name.partition(".")
        if not _ or not key:
            raise ConfigError(f"--set {item!r}: expected DETECTOR.PARAM=VALUE, e.g. "
                              "repeated_error.min_count=50")
        layers.setdefault(det.strip(), {})[key.strip()] = value.strip()
    out = {}
    for det, table in layers.items():
        if det not in DETECTORS:
            raise ConfigError(f"unknown detector {det!r} in settings; detectors: "
                              f"{', '.join(DETECTORS)}")
        known = {n: d for n, d, _ in param_docs(DETECTORS[det].params)}
        for key in table:
            if key not in known:
                raise ConfigError(f"{det} has no parameter {key!r}; it has: {', '.join(known)}")
    for name, det in DETECTORS.items():
        table = layers.get(name, {})
        values = {k: _coerce(v, dict((n, d) for n, d, _ in param_docs(det.params))[k],
                             f"{name}.{k}") for k, v in table.items()}
        out[name] = dataclasses.replace(det.params(), **values)
    return out


# detectors run at once (each on a connection of its own; DuckDB and numpy release the GIL)
LANES = 2
# Up to this many events, the detectors whose memory grows with the log (`grows_with_log`)
# run side by side like the others; above it, one after the other, while the rest run
# beside them. Each holds about 35 bytes an event at its peak (0.4-0.45 GB at 10x the
# incident, 12.7 M events: the scan peaked at 1.15-1.19 GB with them side by side, 0.79-0.91
# GB one at a time); two at once at this bound hold about 0.3 GB, what a scan has left of
# its 1 GB beside DuckDB's share. Below it the two lanes share their work: at the incident's
# size (1.27 M events) the lane of the light detectors had waited 0.7 s for the other.
SIDE_BY_SIDE_EVENTS = 4_000_000


def run_detectors(con: duckdb.DuckDBPyConnection, params: dict[str, Any],
                  only: list[str] | None = None, lanes: int = LANES,
                  beside: Sequence[Callable[[duckdb.DuckDBPyConnection], Any]] = ()
                  ) -> list[Finding]:
    """Run every detector (or `only` these) over the views in `con`, `lanes` at a time; the
    findings come out in the registry's order, whichever finished first. `beside`: work
    over the same events that needs no finding (a scan's coverage), each called with a
    lane's connection once the detectors are all taken: the lane that ran the light
    detectors would otherwise wait for those whose memory grows with the log."""
    present = event_kinds(con)
    names = [n for n, d in DETECTORS.items() if (not only or n in only)
             and d.has_to_read(present)]
    one_at_a_time = sum(kind_counts(con).values()) > SIDE_BY_SIDE_EVENTS
    for name in names:
        if DETECTORS[name].prepare is not None:
            DETECTORS[name].prepare(con, params[name])
    # what a detector prepared gets ready while the others run: those that prepared start
    # last, by rank (repeated_action and alternating_action prepare to share one pass over
    # the actions); a lane's detectors run where its first is
    order = sorted(names, key=lambda n: (DETECTORS[n].prepare is not None, DETECTORS[n].rank))
    found = _run_lanes(con, params, [*_jobs(order, one_at_a_time), *beside], lanes)
    return [f for name in names for f in found[name]]


def _jobs(order: list[str], one_at_a_time: bool = True) -> list[list[str]]:
    """The detectors in `order`, those of one `Detector.lane` together (where the first is),
    and with `one_at_a_time` all those whose memory grows with the log (`grows_with_log`) too."""
    jobs: list[list[str]] = []
    at: dict[str, list[str]] = {}
    for name in order:
        lane = "grows with the log" if one_at_a_time and DETECTORS[name].grows_with_log \
            else DETECTORS[name].lane
        if lane and lane in at:
            at[lane].append(name)
            continue
        jobs.append([name])
        if lane:
            at[lane] = jobs[-1]
    return jobs


def _run_lanes(con: duckdb.DuckDBPyConnection, params: dict[str, Any],
               jobs: list[list[str] | Callable[[duckdb.DuckDBPyConnection], Any]],
               lanes: int) -> dict[str, list[Finding]]:
    """Each job's detectors (or the job, a callable), one after the other, on one of `lanes`
    connections (`con` and siblings of it), each lane taking the next job as it is free; the
    first error is raised once the lanes have stopped (none takes another job after it)."""
    found: dict[str, list[Finding]] = {}
    todo = list(reversed(jobs))
    lock = threading.Lock()
    failed: list[BaseException] = []

    def lane(c: duckdb.DuckDBPyConnection) -> None:
        while True:
            with lock:
                if failed or not todo:
                    return
                job = todo.pop()
            try:
                if callable(job):
                    job(c)
                else:
                    for name in job:
                        found[name] = list(DETECTORS[name].run(c, params[name]))
            except BaseException as exc:
                with lock:
                    failed.append(exc)
                return

    made: list[duckdb.DuckDBPyConnection] = []

    def other_lane(make: Callable[[], duckdb.DuckDBPyConnection]) -> None:
        try:  # its connection made here, while `con`'s lane is at work
            made.append(make())
        except BaseException as exc:
            with lock:
                failed.append(exc)
            return
        lane(made[-1])

    try:
        threads = [threading.Thread(target=other_lane, args=(sibling_to_make(con),),
                                    name=f"detectors-{i}")
                   for i in range(1, min(lanes, len(jobs)))]
        for t in threads:
            t.start()
        try:
            lane(con)
        finally:
            for t in threads:
                t.join()
    finally:
        for c in made:
            c.close()
    if failed:
        raise failed[0]
    return found


__all__ = ["DETECTORS", "ConfigError", "Detector", "Finding", "run_detectors", "settings"]
