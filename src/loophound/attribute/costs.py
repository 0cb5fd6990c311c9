"""What an event cost, decided at report time, never frozen at ingest.

Four sources, in order of trust, each labelled so a reader knows what a dollar figure rests on:
`stated` (the log says what it cost), `priced` (its tokens, cache reads and writes included,
priced by a maintained price table: `genai-prices`, whose snapshot ships inside the package,
so pricing works offline; `--prices FILE` adds or overrides models), `assumed` (a
user-settable cost per agent call, for logs with no tokens, such as bproxy), and `unpriced`
(tokens of a model no table knows: shown as unpriced, never as $0).

Canonical token columns: `tokens_in` is the input not read from or written to the prompt
cache; `tokens_cache_read` and `tokens_cache_write` are the cached parts (priced at their
own rates); `tokens_out` the output.
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import duckdb

from .. import db
from ..db import sql_literal
from ..store import define_message_copies

# A Haiku sub-agent call (seed 001): ~2,000 input and ~100 output tokens at $0.80/$4 per M.
DEFAULT_COST_PER_CALL = 0.002
# Distinct (model, token counts) priced one by one (tiers, cache rates exact); past this many,
# each model's per-token rates are used (a million-token call's prices, without tiers).
EXACT_COMBOS = 5000


@dataclass
class CostModel:
    # models priced from a user's price file (model → (input, output) $ per million tokens),
    # over the maintained table
    prices: dict[str, tuple[float, float]] = field(default_factory=dict)
    version: str = ""
    cost_per_call: float | None = DEFAULT_COST_PER_CALL  # None: requests are not priced
    call_kinds: tuple[str, ...] = ("request", "message", "room_post")

    def describe(self) -> dict:
        return {
            "price_table_version": self.version,
            "user_priced_models": len(self.prices),
            "cost_per_agent_call_usd": self.cost_per_call,
            "assumption": (
                f"each {'/'.join(self.call_kinds)} without tokens or a stated cost is one agent "
                f"call costing ${self.cost_per_call:g}" if self.cost_per_call is not None
                else "calls without tokens or a stated cost are not priced"),
        }


def table_version() -> str:
    """The maintained price table's name and version (its snapshot is in the package)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f"genai-prices {version('genai-prices')}"
    except PackageNotFoundError:  # pragma: no cover - a declared dependency
        return "genai-prices (not installed)"


def load_cost_model(prices_file: Path | None = None,
                    cost_per_call: float | None = DEFAULT_COST_PER_CALL) -> CostModel:
    """The maintained table, extended and overridden by `prices_file` (TOML: a `version` and
    `[models."name"] input = ..., output = ...` in USD per million tokens)."""
    versions = [table_version()]
    prices: dict[str, tuple[float, float]] = {}
    if prices_file is not None:
        try:
            table = tomllib.loads(Path(prices_file).read_text())
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise ValueError(f"cannot read price file {prices_file}: {exc}") from None
        versions.append(str(table.get("version", "user")))
        models = table.get("models", {})
        if not isinstance(models, dict):
            raise ValueError(f"{prices_file}: `models` must be tables, one a model: "
                             '[models."gpt-4o"] input = 2.5, output = 10.0 (USD per million '
                             "tokens)")
        for model, p in models.items():
            try:
                price = (float(p["input"]), float(p["output"]))
            except (KeyError, TypeError, ValueError):
                raise ValueError(f"price of {model!r} needs numeric `input` and `output` "
                                 "(USD per million tokens)") from None
            if not all(math.isfinite(x) and x >= 0 for x in price):
                raise ValueError(f"price of {model!r}: `input` and `output` must be finite and "
                                 "not negative (USD per million tokens)")
            prices[model] = price
    return CostModel(prices, "+".join(versions), cost_per_call)


TOKENS = ("tokens_in", "tokens_out", "tokens_cache_read", "tokens_cache_write")


def _price_combos(con: duckdb.DuckDBPyConnection, model: CostModel, source: str) -> None:
    """`_priced(model, tokens_in, tokens_out, tokens_cache_read, tokens_cache_write, cost)`:
    the price of each distinct model and token counts in `source` that states no cost; cost
    NULL for a model no table knows. Python prices each combination once (a log has few: one
    per model call at most)."""
    has = {c for (c,) in con.execute(
        f"SELECT column_name FROM (DESCRIBE SELECT * FROM {source})").fetchall()}
    cols = [f"e.{c}" if c in has else f"CAST(NULL AS BIGINT) AS {c}" for c in TOKENS]
    combos = con.execute(f"""
        SELECT DISTINCT e.model, {', '.join(cols)} FROM {source} e
        WHERE e.cost_usd IS NULL AND e.model IS NOT NULL
          AND (e.tokens_in IS NOT NULL OR e.tokens_out IS NOT NULL)""").fetchall()
    exact = len(combos) <= EXACT_COMBOS
    rates: dict[str, tuple[float, float, float, float] | None] = {}
    priced = []
    for m, t_in, t_out, t_cr, t_cw in combos:
        counts = (t_in or 0, t_out or 0, t_cr or 0, t_cw or 0)
        if m in model.prices:
            p_in, p_out = model.prices[m]
            cost = (counts[0] * p_in + counts[1] * p_out + (counts[2] + counts[3]) * p_in) / 1e6
        elif exact:
            cost = _catalog_price(m, *counts)
        else:
            if m not in rates:
                rates[m] = _catalog_rates(m)
            r = rates[m]
            cost = None if r is None else sum(c * x for c, x in zip(counts, r, strict=True)) / 1e6
        priced.append((m, t_in, t_out, t_cr, t_cw, cost))
    db.temp_table(con, "_priced", {
        "model": ("VARCHAR", [r[0] for r in priced]),
        **{c: ("BIGINT", [r[i + 1] for r in priced]) for i, c in enumerate(TOKENS)},
        "cost": ("DOUBLE", [r[5] for r in priced])})


def _catalog_price(model_ref: str, t_in: int, t_out: int, t_cr: int, t_cw: int) -> float | None:
    """The maintained table's price of one call (None: it does not know the model)."""
    from genai_prices import Usage, calc_price

    usage = Usage(input_tokens=t_in + t_cr + t_cw, output_tokens=t_out,
                  cache_read_tokens=t_cr, cache_write_tokens=t_cw)
    try:
        return float(calc_price(usage, model_ref).total_price)
    except LookupError:
        return None


def _catalog_rates(model_ref: str) -> tuple[float, float, float, float] | None:
    """$ per million tokens of each kind (input, output, cache read, cache write)."""
    per = [_catalog_price(model_ref, *(10**6 if i == k else 0 for i in range(4)))
           for k in range(4)]
    return None if per[0] is None else tuple(p or 0.0 for p in per)


def define_cost_view(con: duckdb.DuckDBPyConnection, model: CostModel,
                     source: str = "events") -> None:
    """`event_costs(event_id, cost_usd, cost_status, tokens)`: one row per event of `source`
    (the view `events`, or a table of some of them) that costs something, materialised once
    per scan; `_copies(event_id, canon)`: second stored copies of one message, and the event
    they copy."""
    columns, joins = price_events(con, model, source)
    con.execute(f"""
      CREATE OR REPLACE TEMP TABLE event_costs AS
      SELECT * FROM (SELECT e.event_id, {columns} FROM {source} e {joins})
      WHERE cost_status IS NOT NULL""")


def price_events(con: duckdb.DuckDBPyConnection, model: CostModel,
                 source: str = "events") -> tuple[str, str]:
    """SQL that prices each event `e` of `source`: the select list `cost_usd,
    cost_status, tokens` (all three NULL for an event that costs nothing, which `event_costs` leaves
    out) and the joins it needs. Makes `_priced` (each model and token counts priced once)
    and `_copies` first. Attribution prices the events in its own pass over them."""
    _price_combos(con, model, source)
    per_call = "NULL" if model.cost_per_call is None else repr(float(model.cost_per_call))
    # a message both parties stored is one call: only its first copy is priced
    define_message_copies(con)
    kinds = ", ".join(sql_literal(k) for k in model.call_kinds)
    has = {c for (c,) in con.execute(
        f"SELECT column_name FROM (DESCRIBE SELECT * FROM {source})").fetchall()}

    def cache(which: str) -> str:  # a table of some events may not carry the cache columns
        return f"e.tokens_cache_{which}" if f"tokens_cache_{which}" in has else "NULL"

    costs = f"""(e.cost_usd IS NOT NULL OR e.tokens_in IS NOT NULL OR e.tokens_out IS NOT NULL
             OR ({per_call} IS NOT NULL AND e.kind IN ({kinds}) AND _cp.event_id IS NULL))"""
    columns = f"""
        CASE WHEN {costs} THEN
          CASE WHEN e.cost_usd IS NOT NULL THEN e.cost_usd
               WHEN e.tokens_in IS NOT NULL OR e.tokens_out IS NOT NULL THEN _p.cost
               ELSE {per_call} END END AS cost_usd,
        CASE WHEN {costs} THEN
          CASE WHEN e.cost_usd IS NOT NULL THEN 'stated'
               WHEN (e.tokens_in IS NOT NULL OR e.tokens_out IS NOT NULL) AND _p.cost IS NOT NULL
                 THEN 'priced'
               WHEN e.tokens_in IS NOT NULL OR e.tokens_out IS NOT NULL THEN 'unpriced'
               ELSE 'assumed' END END AS cost_status,
        CASE WHEN {costs} THEN coalesce(e.tokens_in, 0) + coalesce(e.tokens_out, 0) END
          AS tokens"""
    joins = f"""
      LEFT JOIN _priced _p ON e.cost_usd IS NULL AND _p.model = e.model
        AND _p.tokens_in IS NOT DISTINCT FROM e.tokens_in
        AND _p.tokens_out IS NOT DISTINCT FROM e.tokens_out
        AND _p.tokens_cache_read IS NOT DISTINCT FROM {cache('read')}
        AND _p.tokens_cache_write IS NOT DISTINCT FROM {cache('write')}
      LEFT JOIN _copies _cp ON _cp.event_id = e.event_id"""
    return columns, joins
