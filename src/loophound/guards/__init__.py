"""The guard lab: replay runtime guards (circuit breakers, cycle checks, rate limits, hop
budgets, ...) over a log that was scanned, and measure what each would have stopped.

- `spec.py`: the declarative spec (TOML `[[guard]]` tables, checked), the guard types and
  their parameters, the shipped presets (`presets/*.toml`), sweeps;
- `machines.py`: each guard type as a pure state machine per key, and `replay`;
- `log.py`: the scanned log as the machines read it (time order, links, costs, claims);
- `lab.py`: the replay of a spec and the `loophound.guards/v1` document.

The report's section "What would have stopped it" reads that document; it does not import
this package.
"""

from __future__ import annotations

from .spec import (
    TYPES,
    Guard,
    Spec,
    Sweep,
    combine,
    load_spec,
    parse_spec,
    parse_sweep,
    preset_names,
    preset_spec,
)


def __getattr__(name: str):
    """The lab (numpy, DuckDB, the findings document) is loaded when it is first used, not by
    `loophound --help` or `loophound sql`, which need only the preset names."""
    if name in ("SCHEMA", "run"):
        from . import lab

        return getattr(lab, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["SCHEMA", "TYPES", "Guard", "Spec", "Sweep", "combine", "load_spec", "parse_spec",
           "parse_sweep", "preset_names", "preset_spec", "run"]
