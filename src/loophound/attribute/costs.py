"""What an event cost, decided at report time, never frozen at ingest.

Four sources, in order of trust, each labelled so a reader knows what a dollar figure rests on:
`stated` (the log says what it cost), `priced` (tokens × the versioned price table),
`assumed` (a user-settable cost per agent call, for logs with no tokens, such as bproxy),
and `unpriced` (tokens of a model with no price: shown as unpriced, never as $0).
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

import duckdb

from .. import db
from ..db import sql_literal
from ..store import define_message_copies

# A Haiku sub-agent call (seed 001): ~2,000 input and ~100 output tokens at $0.80/$4 per M.
DEFAULT_COST_PER_CALL = 0.002


@dataclass
class CostModel:
    prices: dict[str, tuple[float, float]] = field(default_factory=dict)  # model → (in, out) $/M
    version: str = ""
    cost_per_call: float | None = DEFAULT_COST_PER_CALL  # None: requests are not priced
    call_kinds: tuple[str, ...] = ("request", "message", "room_post")

    def describe(self) -> dict:
        return {
            "price_table_version": self.version,
            "priced_models": len(self.prices),
            "cost_per_agent_call_usd": self.cost_per_call,
            "assumption": (
                f"each {'/'.join(self.call_kinds)} without tokens or a stated cost is one agent "
                f"call costing ${self.cost_per_call:g}" if self.cost_per_call is not None
                else "calls without tokens or a stated cost are not priced"),
        }


def load_cost_model(prices_file: Path | None = None,
                    cost_per_call: float | None = DEFAULT_COST_PER_CALL) -> CostModel:
    """The shipped price table, extended and overridden by `prices_file`."""
    shipped = tomllib.loads(resources.files("loophound.data").joinpath("prices.toml").read_text())
    tables = [shipped]
    if prices_file is not None:
        try:
            tables.append(tomllib.loads(Path(prices_file).read_text()))
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise ValueError(f"cannot read price file {prices_file}: {exc}") from None
    prices: dict[str, tuple[float, float]] = {}
    versions = []
    for t in tables:
        versions.append(str(t.get("version", "user")))
        for model, p in t.get("models", {}).items():
            try:
                prices[model] = (float(p["input"]), float(p["output"]))
            except (KeyError, TypeError, ValueError):
                raise ValueError(f"price of {model!r} needs numeric `input` and `output` "
                                 "(USD per million tokens)") from None
    return CostModel(prices, "+".join(versions), cost_per_call)


def define_cost_view(con: duckdb.DuckDBPyConnection, model: CostModel,
                     source: str = "events") -> None:
    """`event_costs(event_id, cost_usd, cost_status, tokens)`: one row per event of `source`
    (the view `events`, or a table of some of them) that costs something, materialised once
    per scan; `_copies(event_id, canon)`: second stored copies of one message, and the event
    they copy."""
    rows = sorted(model.prices.items())
    db.temp_table(con, "_prices", {"model": ("VARCHAR", [m for m, _ in rows]),
                                   "p_in": ("DOUBLE", [p[0] for _, p in rows]),
                                   "p_out": ("DOUBLE", [p[1] for _, p in rows])})
    per_call = "NULL" if model.cost_per_call is None else repr(float(model.cost_per_call))
    # a message both parties stored is one call: only its first copy is priced
    define_message_copies(con)
    kinds = ", ".join(sql_literal(k) for k in model.call_kinds)
    con.execute(f"""
      CREATE OR REPLACE TEMP TABLE event_costs AS
      SELECT e.event_id,
        CASE WHEN e.cost_usd IS NOT NULL THEN e.cost_usd
             WHEN (e.tokens_in IS NOT NULL OR e.tokens_out IS NOT NULL) AND p.model IS NOT NULL
               THEN (coalesce(e.tokens_in, 0) * p.p_in + coalesce(e.tokens_out, 0) * p.p_out) / 1e6
             WHEN e.tokens_in IS NOT NULL OR e.tokens_out IS NOT NULL THEN NULL
             ELSE {per_call} END AS cost_usd,
        CASE WHEN e.cost_usd IS NOT NULL THEN 'stated'
             WHEN (e.tokens_in IS NOT NULL OR e.tokens_out IS NOT NULL) AND p.model IS NOT NULL
               THEN 'priced'
             WHEN e.tokens_in IS NOT NULL OR e.tokens_out IS NOT NULL THEN 'unpriced'
             ELSE 'assumed' END AS cost_status,
        coalesce(e.tokens_in, 0) + coalesce(e.tokens_out, 0) AS tokens
      FROM {source} e LEFT JOIN _prices p ON p.model = e.model
      WHERE e.cost_usd IS NOT NULL OR e.tokens_in IS NOT NULL OR e.tokens_out IS NOT NULL
         OR ({per_call} IS NOT NULL AND e.kind IN ({kinds})
             AND e.event_id NOT IN (SELECT event_id FROM _copies))
    """)
