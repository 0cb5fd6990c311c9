"""Multi-agent chat histories: Magentic-One and AG2 (AutoGen 0.2) group chats, one event per turn.

A history is one JSON document holding the turns of a team of agents as a list of
`{"content", "role", ["name"]}` messages, with whatever the run recorded beside it. The
public shape this module was written against is the Who&When benchmark's
(mingyin1/Agents_Failure_Attribution, `Who&When/Hand-Crafted/<n>.json`: Magentic-One,
`Algorithm-Generated/<n>.json`: CaptainAgent/AG2 group chats; MIT): `{"history": [...],
"question", "question_ID", "ground_truth", "mistake_agent", "mistake_step", ...}`. The same
list is what AG2's `GroupChat.messages` and Magentic-One's console log hold.

Who speaks:
- AG2 states the speaker as `name` (its `role` is the chat API's `user`/`assistant`);
- Magentic-One writes it into `role`: `Orchestrator (thought)` (its ledger and plans),
  `Orchestrator (-> WebSurfer)` (an instruction to WebSurfer), `WebSurfer`, `FileSurfer`,
  `ComputerTerminal`, `Assistant`, `human`.

What a turn becomes:
- an instruction `(-> X)` ⇒ `message` to X;
- an aside `(thought)`, `(termination condition)`, `(final answer)` ⇒ `record`;
- a turn that reports what the agent did and saw ⇒ `step`: the web surfer's `I clicked
  'X'.` / `I typed 'q' into 'Search'.` / `I scrolled down one page in the browser.`, the
  file surfer's `Address: <url>` page, a code executor's `exitcode: N (execution ...)` and its
  refusal `There is no code from the last 1 message for me to execute`. action = the verb
  (`clicked`, `typed`, `scrolled`, `address`, `execute`), args = `{"report": <the first
  line>}`, result = the rest without the screenshot's OCR text (the page's title, address and
  viewport: where the action left the agent). An exit code other than 0 and the refusal are
  errors. The OCR text is left out because it differs from one screenshot of the same page to
  the next, and a page that did not change is what a repeated action is judged by;
- any other turn ⇒ `message` to the speaker before it (or after it, for the first).

Magentic-One's Orchestrator states after each round, in its progress ledger, whether the team
is in a loop (`is_in_loop`) and whether it is making progress (`is_progress_being_made`):
`extra.stalled` is true on a ledger that says either, false on one that says neither (the
profile's `stalled_key`, which no_progress reads).

No clock: turn n (1-based) at n - 1 seconds after 2000-01-01 (the simulated clock of
trajectories, `extra.clock` = `step-index`). Session: the file's name (the document states
the task's `question_ID`, which several runs share; it is kept in `extra`). The document's
other members are not events.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import duckdb

from ._document import Member, element_ranges, keys, members, top, trailing
from .base import Format, FormatContext, FormatProfile, sql_str
from .trajectory import CLOCK, RESULT_BYTES, _first, _stem, sim_ts

# the keys under which a document holds its turns, in the order they are looked for
TURN_LISTS = ("history", "messages", "chat_history")


@dataclass(frozen=True)
class Layout:
    turns: Member


def layout(data: bytes) -> Layout | None:
    """Where the document's turns are, None when it is not a chat history (a document whose
    list of turns holds `{"content", "role"}` messages)."""
    start = top(data)
    if start is None or data[start:start + 1] != b"{":
        return None
    found, end = members(data, start)
    if end is not None and trailing(data, end):
        return None  # JSON lines, not one document
    by_key = {m.key: m for m in found if m.key is not None}
    for name in TURN_LISTS:
        lst = by_key.get(name)
        if lst is None or lst.opens(data) != b"[":
            continue
        first = _first(data, lst)  # the first turn only: records() reads the list once, after
        if first is not None and first.opens(data) == b"{" and {"content", "role"} <= set(
                keys(data, first)):
            return Layout(lst)
    return None


def sniff(records: list[dict], path: Path) -> bool:
    return False  # a document is recognised by its bytes (sniff_head), not by its lines


def sniff_head(head: bytes, path: Path) -> bool:
    return layout(head) is not None


def records(data: bytes) -> list[tuple[int, int]] | None:
    """The (offset, length) of every turn of the document."""
    lay = layout(data)
    if lay is None:
        return None
    return element_ranges(data, lay.turns.start)


# a turn that reports an action and what it led to (its first line)
_REPORT = (r"'^(?:I (clicked|typed|scrolled|hovered|visited|navigated|searched|pressed|selected|"
           r"opened|downloaded|went|pasted|closed|zoomed|answered|moved)\b|(Address): |"
           r"exitcode: -?[0-9]+|There is no code from the last)'")
_OCR = r"'(?s)\n*(Automatic OCR of the page screenshot|The following metadata was extracted).*$'"


# Magentic-One's progress ledger (an Orchestrator thought, `Updated Ledger: {...}`) states
# `is_in_loop` and `is_progress_being_made`, each `{"reason", "answer"}`: stalled when either
# says so, not stalled when the ledger says neither, NULL on other turns
_LEDGER = r"""'"{key}"\s*:\s*\{{[^}}]*"answer"\s*:\s*(true|false)'"""
_IN_LOOP = f"regexp_extract(j->>'$.content', {_LEDGER.format(key='is_in_loop')}, 1)"
_PROGRESS = f"regexp_extract(j->>'$.content', {_LEDGER.format(key='is_progress_being_made')}, 1)"
_STALLED = (f"CASE WHEN {_IN_LOOP} = 'true' OR {_PROGRESS} = 'false' THEN true "
            f"WHEN {_IN_LOOP} = 'false' OR {_PROGRESS} = 'true' THEN false END")


def select_sql(ctx: FormatContext) -> str:
    body = "coalesce(j->>'$.content', CAST(j->'$.content' AS VARCHAR), '')"
    role = "coalesce(j->>'$.role', '')"
    aside = f"regexp_extract({role}, '\\(([^)]*)\\)\\s*$', 1)"
    first = f"split_part({body}, chr(10), 1)"
    verb = (f"CASE WHEN {first} LIKE 'exitcode:%' OR {first} LIKE 'There is no code%' THEN 'execute' "
            f"ELSE lower(coalesce(nullif(regexp_extract({first}, {_REPORT}, 1), ''), "
            f"nullif(regexp_extract({first}, {_REPORT}, 2), ''))) END")
    failed = (f"(regexp_matches({first}, '^exitcode: -?[0-9]+') AND NOT "
              f"regexp_matches({first}, '^exitcode: 0\\b')) OR {first} LIKE 'There is no code%'")
    rest = f"regexp_replace(substr({body}, length({first}) + 2), {_OCR}, '')"
    return f"""
    WITH j AS (SELECT line, byte_offset, byte_length, text, CAST(text AS JSON) AS j FROM raw),
    t AS (SELECT *, trim(coalesce(nullif(j->>'$.name', ''),
                                  regexp_replace({role}, '\\s*\\([^)]*\\)\\s*$', ''))) AS speaker,
                 {aside} AS aside, {first} AS head,
                 CASE WHEN {aside} = '' AND regexp_matches({first}, {_REPORT}) THEN {verb} END AS verb
          FROM j)
    SELECT line, byte_offset, byte_length, text,
      CASE WHEN aside LIKE '->%' THEN 'message' WHEN aside <> '' THEN 'record'
           WHEN verb IS NOT NULL THEN 'step' ELSE 'message' END AS kind,
      CASE WHEN aside <> '' THEN aside ELSE coalesce(nullif(j->>'$.role', ''), 'turn') END
        AS event_type,
      nullif(speaker, '') AS actor,
      nullif(trim(regexp_extract(aside, '^->\\s*(.*)$', 1)), '') AS target,
      nullif(j->>'$.role', '') AS role,
      {sql_str(_stem(ctx.path))} AS session,
      verb AS action,
      CASE WHEN verb IS NOT NULL THEN json_object('report', head) END AS args,
      CASE WHEN verb IS NOT NULL THEN left({rest}, {RESULT_BYTES}) END AS result,
      CASE WHEN verb IS NOT NULL THEN NOT ({failed}) END AS ok,
      CASE WHEN verb IS NOT NULL AND ({failed}) THEN head END AS error,
      {sim_ts('line - 1')} AS ts,
      CAST(json_object('clock', '{CLOCK}', 'text', left({body}, 500), 'stalled', {_STALLED})
        AS VARCHAR) AS extra
    FROM t
    """


def finish(con: duckdb.DuckDBPyConnection, ctx: FormatContext) -> None:
    """Address a turn that names no addressee to the speaker before it (after it, for the
    first): in a group chat each turn answers the one before."""
    con.execute("""
      UPDATE batch SET target = t.target FROM (
        SELECT b.line, coalesce(
          (SELECT arg_max(o.actor, o.line) FROM batch o WHERE o.kind IN ('message', 'step')
             AND o.line < b.line AND o.actor IS DISTINCT FROM b.actor),
          (SELECT arg_min(o.actor, o.line) FROM batch o WHERE o.kind IN ('message', 'step')
             AND o.line > b.line AND o.actor IS DISTINCT FROM b.actor)) AS target
        FROM batch b WHERE b.kind IN ('message', 'step') AND b.target IS NULL) t
      WHERE batch.line = t.line AND batch.target IS NULL""")


FIELDS = frozenset({"content", "role", "name"})

PROFILE = FormatProfile(simulated_clock=f"{CLOCK}: a chat history states no time; turn n is at "
                                        "n - 1 seconds after 2000-01-01 UTC",
                        text_key="text", stalled_key="stalled")

FORMAT = Format(
    name="chat_history",
    description="multi-agent chat histories (Magentic-One, AG2 group chats, the Who&When "
                "benchmark's documents): one event per turn, instructions as messages, reported "
                "actions as steps; no clock: turn n at n - 1 s after 2000-01-01 (simulated)",
    sniff=sniff,
    sniff_head=sniff_head,
    select_sql=select_sql,
    mapped_keys=FIELDS,
    finish=finish,
    records=records,
    priority=41,
    profile=PROFILE,
)
