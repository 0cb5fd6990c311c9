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

from .lab import SCHEMA, run
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

__all__ = ["SCHEMA", "TYPES", "Guard", "Spec", "Sweep", "combine", "load_spec", "parse_spec",
           "parse_sweep", "preset_names", "preset_spec", "run"]
