"""`loophound report` and `loophound investigate`: the HTML incident report.

`investigate PATH...` is the one command most people run: ingest, detect, attribute and write
the report, with progress on the terminal. `report` writes the report of a store that already
holds the logs.
"""

# No `from __future__ import annotations`: typer reads the option types of the commands
# defined inside register() at definition time, and they are local names there.

import datetime as dt
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
    from ..store import DEFAULT_STORE
    from .guards import guard_options, print_guards, print_sweep
    from .shell import (
        SEVERITIES,
        CallCostOpt,
        ConfigOpt,
        FindingsListOpt,
        FormatOpt,
        MappingOpt,
        Phases,
        PricesOpt,
        QuietOpt,
        SetOpt,
        StoreOpt,
        err,
        exit_status,
        fail,
        load_mapping_file,
        out,
        print_summary,
        shown,
        user_errors,
    )

    SpecOpt, PresetOpt, SweepOpt = guard_options()
    OutOpt = Annotated[Path, typer.Option("--out", "-o", help="The HTML file to write (its folder "
                                                               "is created).")]
    GeneratedOpt = Annotated[str | None, typer.Option(
        "--generated-at", help="Generation time to print in the report (ISO-8601), for "
                               "reproducible files; default SOURCE_DATE_EPOCH, else now.")]

    def reported(made, list_findings: bool, ingested=None, store=None) -> None:
        print_summary(made.document, findings=list_findings, ingested=ingested, store=store)
        out.print(f"report: {shown(made.path)} ({made.bytes / 1e6:.1f} MB); open it in any browser, "
                  "offline", highlight=False)

    @app.command("report")
    def report_cmd(
        out_file: OutOpt = DEFAULT_OUT,
        store: StoreOpt = Path(DEFAULT_STORE),
        findings_dir: Annotated[Path | None, typer.Option(
            "--findings-dir", help="Report the run saved in this folder (by `scan "
                                   "--findings-dir`, or a scan of a read-only store).")] = None,
        config: ConfigOpt = None,
        set_: SetOpt = None,
        prices: PricesOpt = None,
        cost_per_call: CallCostOpt = None,
        generated_at: GeneratedOpt = None,
        list_findings: FindingsListOpt = False,
        quiet: QuietOpt = False,
    ) -> None:
        """Write the HTML incident report of a store's last saved scan: one file to share.

        Takes no lock and writes nothing in the store, so it works on a store another
        process is writing, on a read-only copy, and on a copy of the Parquet folders. With
        detector or cost settings, or when no saved scan covers all the store holds, it
        scans in memory first and says so.

        Example: loophound report --store .loophound --out reports/incident.html
        """
        from .. import api

        _when(generated_at)
        with Phases(quiet).step("making the report"), user_errors():
            made = api.write_report(store, out_file, generated_at=_when(generated_at),
                              run_folder=findings_dir, config=config, settings=set_ or [],
                              prices=prices, cost_per_call=cost_per_call)
        err.print(f"[dim]from {shown(made.source)}[/]", highlight=False)
        reported(made, list_findings)

    @app.command("investigate")
    def investigate_cmd(
        paths: Annotated[list[str] | None, typer.Argument(
            help="Log files, directories or globs (none: the --store as it is).")] = None,
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
        fail_on: Annotated[str, typer.Option(help="Exit 1 when an incident is at least this "
                                             "severe: low, medium, high, critical or never.")]
        = "never",
        list_findings: FindingsListOpt = False,
        fmt: FormatOpt = None,
        mapping: MappingOpt = None,
        spec: SpecOpt = None,
        preset: PresetOpt = None,
        sweep: SweepOpt = None,
        quiet: QuietOpt = False,
    ) -> None:
        """Ingest PATHs, detect runaway loops, attribute their cost, write the HTML report.

        With --store and no PATHs: scan and report what the store holds (a read-only copy
        included: its findings then go to a temporary folder, and the store is not changed).
        With guards (--preset, --spec, optionally --sweep, as `loophound guards` takes them)
        the report also shows what each would have stopped.

        Example: loophound investigate sample_logs/ --out reports/incident.html
        """
        from .. import api

        if fail_on not in SEVERITIES + ("never",):
            fail(f"--fail-on must be one of {', '.join(SEVERITIES)}, never; got {fail_on!r}")
        if not paths and store is None:
            fail("name the logs to investigate (files, folders or globs), or a --store that "
                 "holds them")
        _when(generated_at)

        read = []  # what ingest read, printed after the verdict
        phases = Phases(quiet)

        with user_errors():
            done = api.investigate(paths or [], out_file, store=store,
                                   generated_at=_when(generated_at), config=config,
                                   settings=set_ or [], prices=prices,
                                   cost_per_call=cost_per_call, on_ingest=read.append,
                                   step=phases.step, on_progress=phases.on_progress,
                                   format=fmt, mapping=load_mapping_file(mapping),
                                   spec=spec, presets=preset or [], sweep=sweep)
        if done.scan.saved_in is not None:
            err.print(f"findings saved in {shown(done.scan.saved_in)} (the store is read-only evidence "
                      "and was not changed)", highlight=False)
        if done.guards is not None:
            print_guards(done.guards)
            if done.guards.get("sweep"):
                print_sweep(done.guards["sweep"])
        reported(done.report, list_findings, read[0] if read else None,
                 store if store is not None else Path("(temporary store)"))
        raise typer.Exit(exit_status(done.report.document, fail_on))
