"""`loophound synth`: write the seeded sample logs, their clean twins, or the full incident."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

synth = typer.Typer(help="Write seeded, realistic logs with answer keys (sample_logs/, "
                         "clean twins, the full-size seed-001 incident).", no_args_is_help=True)

SeedOpt = Annotated[int, typer.Option(help="Random seed: the same seed writes the same bytes.")]


def _not_evidence(target: Path, what: str) -> None:
    """Synthetic logs are never written into a store folder or over a saved scan's files."""
    from .shell import refuse_evidence

    refuse_evidence(None, None, {what: target})


@synth.command("samples")
def samples(outdir: Annotated[Path, typer.Argument(help="Folder to write.")] = Path("sample_logs"),
            seed: SeedOpt = 7) -> None:
    """Every format with its seed incident amid healthy traffic, plus EXPECTED.json.

    Example: loophound synth samples sample_logs/ --seed 7
    """
    from ..synth import write_samples

    _not_evidence(outdir, "OUTDIR")
    truth = write_samples(outdir, seed)
    typer.echo(f"wrote {outdir}/ ({len(truth['sections'])} sections) and {outdir}/EXPECTED.json")


@synth.command("twins")
def twins(outdir: Annotated[Path, typer.Argument(help="Folder to write.")], seed: SeedOpt = 7) -> None:
    """The same logs without the incidents: a detector must stay silent on them.

    Example: loophound synth twins /tmp/clean
    """
    from ..synth import write_clean_twins

    _not_evidence(outdir, "OUTDIR")
    write_clean_twins(outdir, seed)
    typer.echo(f"wrote clean twins to {outdir}/")


@synth.command("full-incident")
def full_incident(path: Annotated[Path, typer.Argument(help="Log file to write.")]
                  = Path("2026-06-18.log"), seed: SeedOpt = 1) -> None:
    """The seed-001 incident at full size: ~1.2 M lines, ~236 MiB, 608,970 failed scrolls
    over 17 h. For benchmarks; takes a few seconds.

    Example: loophound synth full-incident /tmp/2026-06-18.log
    """
    from ..synth import write_full_incident

    _not_evidence(path, "PATH")
    truth = write_full_incident(path, seed)
    storm = truth["incidents"][0]
    typer.echo(f"wrote {path}: {path.stat().st_size:,} bytes, {storm['requests']:,} failed "
               f"`{storm['action']}` requests from {storm['start']} to {storm['end']}")


def register(app: typer.Typer) -> None:
    app.add_typer(synth, name="synth")
