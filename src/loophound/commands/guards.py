"""`loophound guards`: replay runtime guards over a scanned log, see what each would have
stopped (the guard lab; the library is `loophound.api.guards`)."""

# No `from __future__ import annotations`: typer reads the option types of the commands
# defined inside register() at definition time, and they are local names there.

import time
from pathlib import Path
from typing import Annotated

import typer

MAX_COLUMNS = 8  # guards shown side by side in the table of loops


def preset_files() -> list[str]:
    """The shipped presets' names, as `loophound.guards.preset_names` lists them (the
    `presets/*.toml` of the package), found without importing the package: every command's
    start builds the --preset help (`loophound sql` too), and the guard spec costs 30 ms."""
    import importlib.util

    spec = importlib.util.find_spec("loophound.guards")
    folders = (spec.submodule_search_locations or []) if spec else []
    return sorted({f.name[:-5] for d in folders for f in (Path(d) / "presets").iterdir()
                   if f.name.endswith(".toml")})


def _presets_help() -> str:
    return ("A shipped guard preset (repeatable): " + ", ".join(preset_files()) + ". "
            "`had` and `adopted` gather what the incidents' systems had and what their "
            "write-ups adopted; `frameworks` the frameworks' defaults.")


def guard_options() -> tuple:
    """The options that name the guards to replay (`--spec`, `--preset`, `--sweep`), one
    definition for `guards` and `investigate`."""
    spec = Annotated[Path | None, typer.Option(
        "--spec", help="TOML file of [[guard]] tables (see the README: `loophound guards`).")]
    preset = Annotated[list[str] | None, typer.Option("--preset", help=_presets_help())]
    sweep = Annotated[str | None, typer.Option(
        "--sweep", help="Replay one parameter over a range: GUARD.PARAM=LO..HI, e.g. "
                        "hooks-cycle.window=5m..1h.")]
    return spec, preset, sweep


def register(app: typer.Typer) -> None:
    from ..store import DEFAULT_STORE
    from .shell import StoreOpt, err, out, refuse_evidence, shown, user_errors, write_json

    SpecOpt, PresetOpt, SweepOpt = guard_options()

    @app.command("guards")
    def guards_cmd(
        paths: Annotated[list[str] | None, typer.Argument(
            help="Log files, directories or globs to ingest first (none: the store as it "
                 "is).")] = None,
        store: StoreOpt = Path(DEFAULT_STORE),
        spec: SpecOpt = None,
        preset: PresetOpt = None,
        json_out: Annotated[Path | None, typer.Option(
            "--json", help="Write the replay (loophound.guards/v1) to this file; - for "
                           "standard output.")] = None,
        sweep: SweepOpt = None,
        report: Annotated[Path | None, typer.Option(
            "--report", help="Also write the HTML incident report, with the section “What "
                             "would have stopped it”.")] = None,
        generated_at: Annotated[str | None, typer.Option(
            "--generated-at", help="Generation time to print in the report (ISO-8601).")] = None,
    ) -> None:
        """Replay runtime guards over the log, in event time, and show what each would have
        stopped: per guard its trips, first block, the events, lines, tokens and dollars it
        would have refused (and with everything those would have caused), per runaway loop
        the share prevented and what it had cost before, and the healthy events it would have
        refused (false blocks).

        Reads the store's newest saved scan (scanning first when there is none that covers
        what the store holds). Guards come from a --spec file and/or --preset names.

        Example: loophound guards sample_logs/ --preset had --preset adopted --report reports/guards.html
        """
        from .. import api
        from .report import _when

        quiet = json_out is not None and str(json_out) == "-"
        refuse_evidence(store, paths, {"--json": json_out, "--report": report})
        t0 = time.perf_counter()
        with user_errors():
            done = api.guards(store, paths or [], spec=spec, presets=preset or [], sweep=sweep,
                              report=report, generated_at=_when(generated_at))
        doc = done.document
        err.print(f"[dim]{len(doc['guards'])} guard(s) replayed over {shown(done.source)} in "
                  f"{time.perf_counter() - t0:.1f} s[/]", highlight=False)
        write_json(doc, json_out)
        if quiet:
            return
        print_guards(doc)
        if doc.get("sweep"):
            print_sweep(doc["sweep"])
        if done.report is not None:
            out.print(f"report: {shown(done.report.path)} ({done.report.bytes / 1e6:.1f} MB)",
                      highlight=False)


def _money(x: float | None) -> str:
    return "-" if x is None else f"${x:,.2f}"


def print_guards(doc: dict) -> None:
    from rich.table import Table

    from .shell import out, shown

    table = Table(show_edge=False, header_style="bold")
    for col, right in (("guard", False), ("type", False), ("trips", True),
                       ("first block", False), ("refused", True), ("prevented", True),
                       ("saved", True), ("false blocks", True)):
        table.add_column(col, justify="right" if right else "left")
    for g in doc["guards"]:
        lo, hi = g["blocked"], g["blocked_upper"]
        saved = _money(hi["cost_usd"]) if lo["cost_usd"] == hi["cost_usd"] else \
            f"{_money(lo['cost_usd'])}–{_money(hi['cost_usd'])}"
        share = g.get("false_block_share")
        false = f"{g['false_blocks']:,}"
        if g["false_blocks"] and share is not None:
            false += " (<0.1%)" if share < 0.001 else f" ({share:.1%})"
        table.add_row(shown(g["name"]), g["type"], f"{g['trips']:,}",
                      (g["first_block"] or "never").replace("T", " ").rstrip("Z"),
                      f"{lo['events']:,}", f"{hi['events']:,}", saved, false)
    out.print(table)
    log = doc["log"]
    out.print(f"refused: the events a guard would have refused; prevented: with everything "
              f"they would have caused; saved: their dollars. {log['events']:,} events, "
              f"{log['loop_events']:,} in findings, {log['healthy_events']:,} healthy (a "
              "refused healthy event is a false block).", highlight=False)
    acting = [g for g in doc["guards"] if g["blocked_upper"]["events"]]
    shown_guards = acting[:MAX_COLUMNS]
    by_finding = {}
    for g in shown_guards:
        for row in g.get("incidents", []):
            by_finding.setdefault(row["finding_id"], {})[g["name"]] = row
    rows = [r for r in by_finding.values() if any(x["blocked_events"] for x in r.values())]
    if not rows:
        return
    loops = Table(show_edge=False, header_style="bold",
                  title="share of each finding's events prevented, by the guards that act")
    loops.add_column("finding")
    loops.add_column("events", justify="right")
    for g in shown_guards:
        loops.add_column(shown(g["name"]), justify="right")
    for r in rows:
        first = next(iter(r.values()))
        loops.add_row(shown(f"{first['detector']}: {first['title'][:70]}"), f"{first['events']:,}",
                      *[f"{r[g['name']]['share_blocked']:.0%}"
                        if g["name"] in r and r[g["name"]]["share_blocked"] is not None else "-"
                        for g in shown_guards])
    out.print(loops)
    if len(acting) > MAX_COLUMNS:
        out.print(f"(the first {MAX_COLUMNS} guards that act; --json or --report for every "
                  "guard)", highlight=False)


def print_sweep(sw: dict) -> None:
    from rich.table import Table

    from .shell import out, shown

    marks: dict[str, list[str]] = {}
    for m in sw["marks"]:
        marks.setdefault(str(m["value"]), []).append(m["label"])
    table = Table(show_edge=False, header_style="bold",
                  title=f"sweep of {shown(sw['guard'])}.{shown(sw['param'])}")
    for col in (sw["param"], "refused", "prevented", "saved", "false blocks", "marked"):
        table.add_column(col, justify="left" if col in (sw["param"], "marked") else "right")
    for row in sw["rows"]:
        table.add_row(str(row["value"]), f"{row['blocked']['events']:,}",
                      f"{row['blocked_upper']['events']:,}", _money(row["saved_usd"]),
                      f"{row['false_blocks']:,}", shown("; ".join(marks.get(str(row["value"]),
                                                                           []))))
    out.print(table)
    rec = sw["recommended"]
    out.print(f"recommended: {shown(sw['param'])} = {rec['value']} ({rec['reason']}): saves "
              f"{_money(rec['saved_usd'])} with {rec['false_blocks']:,} false block(s)",
              highlight=False)
