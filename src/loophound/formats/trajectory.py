"""Whole-file JSON trajectories of coding and multi-agent runs: one event per step.

A trajectory is one JSON document, written whole (and written again, whole, after every step
while the agent runs), not a log of lines: the steps are the elements of a list inside it.
`records` finds each step's byte range with a streaming scan (`_document.py`); ingest maps the
steps as it maps lines (line = the step's place, byte offset and length = where its JSON is in
the file, so evidence quotes the step), and reads the document again whole when it changes,
replacing its earlier events.

Flavours, recognised by the document's structure (the head's keys, not its name: `.traj` and
`.json` say little):

- SWE-agent `*.traj` (`{"environment", "trajectory": [...], "history": [...], "info",
  "replay_config"}`; sources: SWE-agent's `sweagent/types.py` `TrajectoryStep` and
  `agent/agents.py` `save_trajectory`, the test trajectories in SWE-agent's
  `tests/test_data/trajectories/` and `trajectories/demonstrations/`, MIT). A step of
  `trajectory` (`action`, `observation`, `response`, `thought`, `state`, `execution_time`,
  `query`) ⇒ kind `tool_call`: action = the command's first word (`edit`, `python`,
  `str_replace_editor`, `submit`; a leading `cd DIR &&` and `VAR=value` are skipped), args =
  `{"command": <the action>}`, result = the observation (first 4 KiB), latency =
  `execution_time`. SWE-agent states no exit code: an observation with an error marker (below)
  is an error, one without is ok. `history` repeats the steps as messages and is not read.
- mini-swe-agent `*.traj.json` (`{"info": {"model_stats": {"instance_cost", "api_calls"},
  "config", "mini_version", "exit_status", "submission"}, "messages": [...],
  "trajectory_format": "mini-swe-agent-1" | "mini-swe-agent-1.1"}`, or, in early versions and
  its test data, the bare list of messages; sources: mini-swe-agent's
  `run/utils/save.py` `save_traj`, `agents/default.py`, `docs/usage/output_files.md`, its
  `tests/test_data/github_issue.traj.json` (MIT, copied into tests/data/trajectory/ with its
  notice) and published SWE-bench runs). A message is a step: `system` and the task ⇒
  `message`; an `assistant` message with a command (v2: `extra.actions[0].command` or the
  first tool call's `command`; v1: the ```` ```bash ```` or ```` ```mswea_bash_command ````
  block) ⇒ `tool_call`, one without ⇒ `llm_call` when it states usage or cost, else
  `message`; the observation (a `tool` message with `tool_call_id`, or in v1 the `user`
  message after the command: `<returncode>N</returncode><output>...`) ⇒ `response`, joined
  to its call: exit code 0 is ok, any other an error. Usage of `extra.response.usage`
  (tokens, cache reads), `extra.cost` (stated cost), `extra.response.model`, else the model of
  `info.config.model.model_name`. Other `user` messages ⇒ `message` from `environment` (a
  format error or a timeout is the error).
- OpenHands exported event lists (the JSON array `--save-trajectory-path` and the UI's
  export write; sources: OpenHands `events/serialization/event.py` `event_to_trajectory`,
  `frontend/src/types/core/base.ts`, the replay trajectories in `tests/runtime/trajs/`, MIT):
  `{"id", "timestamp", "source": agent|user|environment, "message", "action", "args",
  "tool_call_metadata", "timeout"}` and `{"id", "timestamp", "source", "message", "cause",
  "observation", "content", "extras", "success"}`. An action ⇒ `tool_call` (`run`: action =
  the command's first word; others: the tool's `function_name`, else the action), `message` for
  `message`/`system`, `record` for state changes, thoughts, recalls and `finish`; an
  observation with a `cause` ⇒ `response` joined to that action (exit code from
  `extras.metadata.exit_code` or `extras.exit_code`, else `success`; an `error` observation is
  an error). Tokens from `tool_call_metadata.model_response.usage`, counted once per model
  response (the calls of one response carry the same usage).
- AutoGen AgentChat / Magentic-One message histories (a `TaskResult`'s `messages`, or the list
  itself, as `model_dump()` writes it; sources: autogen-agentchat `messages.py`): `{"source",
  "models_usage": {"prompt_tokens", "completion_tokens"}, "metadata", "content", "type",
  ["created_at"]}`. `ToolCallRequestEvent` ⇒ `tool_call` (the first call's `name`,
  `arguments`, `id`), `ToolCallExecutionEvent` ⇒ `response` (`call_id`, `is_error`), a
  `...Message` ⇒ `message` from `source` to the last other speaker (a `HandoffMessage` to its
  `target`), anything else ⇒ `record`. AutoGen 0.2 histories (`{"content", "role", "name"}`)
  are messages from `name`.

Every flavour: actor = the agent (`swe-agent`, `mini-swe-agent`, `openhands`, AutoGen's
`source`), or `user`, `system`, `environment`; session = the trajectory's `instance_id` when it
states one, else the file name without `.traj`/`.json`; result = the observation's first 4 KiB.
Error markers where no exit code is stated (and, beside a non-zero one, the better name for
the error): the last exception line of a traceback (`ZeroDivisionError: division by zero`),
else the first line saying `command not found`, `No such file or directory`, `ERROR: ...`,
`No replacement was performed`, `Your proposed edit has introduced new syntax error(s)`,
`No file open`, a timeout, `FAILED ...`, `Usage: ...`; else `Exit code N`.

Time: the step's own time where the trajectory has one (OpenHands `timestamp`, AutoGen
`created_at`, mini-swe-agent v2 `extra.timestamp`, a model response's `created`); a step
without one takes the time of the step before it (or after, at the start). A trajectory with
no time at all (SWE-agent, mini-swe-agent v1) is placed on the simulated clock LabTrust's
`t_s` uses: step n (0-based) at n seconds after 2000-01-01T00:00:00Z, and `extra.clock` says
`step-index`; its calls then have no latency but SWE-agent's `execution_time`.

Not read: a document with anything after its end (JSON lines: another format's); OpenHands
`output.jsonl` (one trajectory per line under `history`); several tool calls of one
response (the first is the event, `extra.calls` says how many); SWE-agent's `history`.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

import duckdb

from ..lines import open_binary
from ..schema import SIM_EPOCH
from ._agents import ERROR_CHARS, RESULT_BYTES, pair_tool_results
from ._document import Member, element_ranges, keys, members, top, trailing, value
from .base import Format, FormatContext, FormatProfile, epoch_to_ts, iso_to_ts, sql_str

SWE_AGENT, MINI, OPENHANDS, AUTOGEN, CHAT = "swe-agent", "mini-swe-agent", "openhands", "autogen", "chat"
CLOCK = "step-index"  # extra.clock of events placed on the simulated clock
# the keys under which a document holds its steps, in the order they are looked for
STEP_LISTS = ("trajectory", "messages", "history", "events")


@dataclass(frozen=True)
class Layout:
    """What a document is: its flavour, the list of its steps (None: the document is that
    list) and its other top-level members."""

    flavour: str
    steps: Member | None
    top: dict[str, Member]


def _first(data: bytes, lst: Member) -> Member | None:
    """The first element of the list `lst`, as far as the data goes (None when empty)."""
    pos = lst.start + 1
    while pos < len(data) and data[pos] in b" \t\r\n":
        pos += 1
    if pos >= len(data) or data[pos:pos + 1] == b"]":
        return None
    return Member(None, pos, None)


def _flavour_of_step(step_keys: set[str], list_key: str | None) -> str | None:
    if "source" in step_keys and step_keys & {"action", "observation"}:
        return OPENHANDS
    if "source" in step_keys and "type" in step_keys:
        return AUTOGEN
    if "role" in step_keys and step_keys & {"content", "tool_calls"}:
        return CHAT
    if list_key == "trajectory" and step_keys & {"action", "observation", "thought"}:
        return SWE_AGENT
    return None


def layout(data: bytes) -> Layout | None:
    """The layout of a document (or of its head: a cut-off one is read as far as it goes),
    None when it is not a trajectory this format reads."""
    start = top(data)
    if start is None:
        return None
    if data[start:start + 1] == b"[":
        whole = Member(None, start, None)
        first = _first(data, whole)
        if first is None or first.opens(data) != b"{":
            return None
        flavour = _flavour_of_step(set(keys(data, first)), None)
        return Layout(flavour, None, {}) if flavour else None
    found, end = members(data, start)
    if end is not None and trailing(data, end):
        return None  # JSON lines, not one document
    by_key = {m.key: m for m in found if m.key is not None}
    for name in STEP_LISTS:
        lst = by_key.get(name)
        if lst is None or lst.opens(data) != b"[":
            continue
        first = _first(data, lst)
        if first is not None and first.opens(data) == b"{":
            flavour = _flavour_of_step(set(keys(data, first)), name)
            if flavour == CHAT and not (by_key.keys() & {"info", "trajectory_format",
                                                         "instance_id"}):
                continue  # a list of chat messages in some other document
            if flavour:
                return Layout(MINI if flavour == CHAT else flavour, lst, by_key)
    # the steps are not in the head (a long `info` first), or there are none yet
    info_keys = set(keys(data, by_key["info"])) if "info" in by_key else set()
    if "trajectory_format" in by_key or "mini_version" in info_keys or (
            "messages" in by_key and "model_stats" in info_keys):
        return Layout(MINI, by_key.get("messages"), by_key)
    if "trajectory" in by_key and by_key["trajectory"].opens(data) == b"[" and (
            by_key.keys() & {"history", "info", "environment", "replay_config"}):
        return Layout(SWE_AGENT, by_key["trajectory"], by_key)
    return None


def sniff(records: list[dict], path: Path) -> bool:
    return False  # a document is recognised by its bytes (sniff_head), not by its lines


def sniff_head(head: bytes, path: Path) -> bool:
    return layout(head) is not None


def records(data: bytes) -> list[tuple[int, int]] | None:
    """The (offset, length) of every step of the document; None when it holds no list of
    steps this format knows. A step the data ends inside runs to the end of the data (it is
    then quarantined as invalid JSON)."""
    lay = layout(data)
    if lay is None:
        return None
    start = top(data) if lay.steps is None else lay.steps.start
    if lay.steps is not None and lay.steps.opens(data) != b"[":
        return None
    return element_ranges(data, start)


# -- what the document says of itself -------------------------------------------------------


@dataclass(frozen=True)
class Facts:
    flavour: str
    session: str
    agent: str
    model: str | None


GENERIC_NAMES = {"trajectory", "trajectories", "history", "events", "messages", "output",
                 "result", "results", "log", "run", "traj"}


def _stem(path: Path) -> str:
    """The file's name without `.traj`/`.json` (and compression); a name that says nothing of
    the run (`trajectory.json`) is prefixed with its folder's."""
    name = path.name
    for suffix in (".gz", ".zst", ".bz2", ".json", ".traj"):
        name = name.removesuffix(suffix)
    if name.lower() in GENERIC_NAMES and path.parent.name:
        return f"{path.parent.name}/{name}"
    return name or path.name


def facts_of(data: bytes, path: Path) -> Facts | None:
    lay = layout(data)
    if lay is None:
        return None
    info = value(data, lay.top["info"]) if "info" in lay.top else None
    info = info if isinstance(info, dict) else {}
    session = value(data, lay.top["instance_id"]) if "instance_id" in lay.top else None
    session = session or info.get("instance_id")
    model = None
    if lay.flavour == MINI:
        config = info.get("config") if isinstance(info.get("config"), dict) else {}
        model_cfg = config.get("model") if isinstance(config.get("model"), dict) else {}
        model = model_cfg.get("model_name")
    elif lay.flavour == SWE_AGENT and "replay_config" in lay.top:
        replay = value(data, lay.top["replay_config"])
        try:
            replay = json.loads(replay) if isinstance(replay, str) else replay
        except ValueError:
            replay = None
        agent = replay.get("agent") if isinstance(replay, dict) else None
        model_cfg = agent.get("model") if isinstance(agent, dict) else None
        model = model_cfg.get("name") if isinstance(model_cfg, dict) else None
    named_mini = path.name.endswith((".traj.json", ".traj.json.gz"))
    flavour = MINI if lay.flavour == CHAT and named_mini else lay.flavour
    agent = {SWE_AGENT: "swe-agent", MINI: "mini-swe-agent", OPENHANDS: "openhands"}.get(
        flavour, "assistant")
    return Facts(flavour, str(session) if isinstance(session, (str, int)) else _stem(path),
                 agent, model if isinstance(model, str) else None)


_FACTS: OrderedDict[tuple, Facts | None] = OrderedDict()


def facts(path: Path) -> Facts | None:
    """The facts of the document at `path` (kept for the few calls of one read)."""
    try:
        st = path.stat()
    except OSError:
        return None
    k = (str(path), st.st_size, st.st_mtime_ns)
    if k not in _FACTS:
        try:
            with open_binary(path) as fh:
                data = fh.read()
        except (OSError, EOFError):
            return None
        _FACTS[k] = facts_of(data, path)
        while len(_FACTS) > 8:
            _FACTS.popitem(last=False)
    return _FACTS[k]


# -- SQL ------------------------------------------------------------------------------------

# a leading `cd DIR &&` / `cd DIR;` and `VAR=value` words are not the command
_PREFIX = r"^\s*(?:(?:cd\s+[^;&|\n]+?\s*(?:&&|;)|[A-Za-z_][A-Za-z0-9_]*=\S*)\s*)+"
_EXCEPTION = (r"(?m)^\s*((?:[A-Za-z_][A-Za-z0-9_]*\.)*[A-Za-z_][A-Za-z0-9_]*"
              r"(?:Error|Exception|Interrupt)(?::[^\n]*)?)\s*$")
_MARKER = (r"(?m)^((?:bash|sh|/bin/sh|/bin/bash|zsh): [^\n]+|[^\n]+: command not found|"
           r"[^\n]+: No such file or directory|(?:ERROR|Error|error|fatal|FATAL): [^\n]+|"
           r"No replacement was performed[^\n]*|Your proposed edit has introduced new syntax "
           r"error[^\n]*|No file open\.[^\n]*|The command [^\n]*(?:timed out|was cancelled)"
           r"[^\n]*|The last command [^\n]*timed out[^\n]*|FAILED [^\n]+|Usage: [^\n]+)\s*$")


def first_word(cmd: str) -> str:
    """SQL: the command's first word (after a leading `cd DIR &&` and `VAR=value`)."""
    rest = f"regexp_replace({cmd}, {sql_str(_PREFIX)}, '')"
    return f"nullif(regexp_extract({rest}, '^\\s*([^\\s;&|()<>]+)', 1), '')"


def _clip_line(expr: str) -> str:
    return f"nullif(left(trim({expr}), {ERROR_CHARS}), '')"


def _first_line(expr: str) -> str:
    """SQL: the first non-blank line of `expr`, at most ERROR_CHARS characters."""
    return _clip_line("regexp_extract(" + expr + r", '^\s*([^\n]*)', 1)")


def error_sql(out: str, code: str) -> str:
    """SQL: the error of a step whose output is `out` and exit code `code` (NULL: none
    stated): with a non-zero code, the exception or marker line, else `Exit code N`; without
    one, the exception or marker line; an OpenHands editor error (`ERROR:` on a line of its
    own) by the line after it."""
    exc = f"(regexp_extract_all({out}, {sql_str(_EXCEPTION)}, 1))[-1]"
    marker = f"nullif(regexp_extract({out}, {sql_str(_MARKER)}, 1), '')"
    after = r"'^ERROR:\n\s*([^\n]+)'"
    editor = (f"CASE WHEN starts_with(ltrim({out}), 'ERROR:' || chr(10)) THEN "
              f"regexp_extract(ltrim({out}), {after}, 1) END")
    named = f"coalesce({_clip_line(exc)}, {_clip_line(editor)}, {_clip_line(marker)})"
    return (f"CASE WHEN {code} IS NOT NULL AND {code} <> 0 "
            f"THEN coalesce({named}, 'Exit code ' || CAST({code} AS VARCHAR)) "
            f"WHEN {code} IS NULL THEN {named} END")


def _usage(u: str) -> dict[str, str]:
    """SQL: the token columns of an OpenAI-style usage object (litellm's, as mini-swe-agent
    and OpenHands keep it): prompt tokens less the cached ones and the cache writes."""
    read = (f"coalesce(TRY_CAST({u}->>'$.prompt_tokens_details.cached_tokens' AS BIGINT), "
            f"TRY_CAST({u}->>'$.cache_read_input_tokens' AS BIGINT))")
    write = f"TRY_CAST({u}->>'$.cache_creation_input_tokens' AS BIGINT)"
    prompt = f"TRY_CAST({u}->>'$.prompt_tokens' AS BIGINT)"
    return {
        "tokens_in": f"CASE WHEN {prompt} IS NOT NULL "
                     f"THEN greatest({prompt} - coalesce({read}, 0) - coalesce({write}, 0), 0) END",
        "tokens_out": f"TRY_CAST({u}->>'$.completion_tokens' AS BIGINT)",
        "tokens_cache_read": f"nullif({read}, 0)",
        "tokens_cache_write": f"nullif({write}, 0)",
    }


def _clip(expr: str) -> str:
    return f"left({expr}, {RESULT_BYTES})"


def _text(path: str) -> str:
    """SQL: the text of a message's content at `path`: a string, or the texts of a list of
    parts (`{"type": "text", "text"}` or bare strings) joined by newlines."""
    parts = (f"list_filter(list_transform(json_extract(j, '{path}[*]'), lambda c: "
             "CASE json_type(c) WHEN 'VARCHAR' THEN c->>'$' ELSE c->>'$.text' END), "
             "lambda s: s IS NOT NULL)")
    return (f"CASE json_type(j, '{path}') WHEN 'VARCHAR' THEN j->>'{path}' "
            f"WHEN 'ARRAY' THEN array_to_string({parts}, chr(10)) END")


def _has_list(path: str) -> str:
    return f"coalesce(json_array_length(j, '{path}'), 0) > 0"


COLUMNS = ("own_ts", "kind", "event_type", "actor", "target", "role", "action", "args", "result",
           "ok", "error", "corr_id", "tokens_in", "tokens_out", "tokens_cache_read",
           "tokens_cache_write", "cost_usd", "latency_ms", "model", "extra")


def _select(cols: dict[str, str], source: str) -> str:
    body = ",\n      ".join(f"{cols.get(c, 'NULL')} AS {c}" for c in COLUMNS)
    return f"SELECT line, byte_offset, byte_length, text,\n      {body}\n    FROM {source}"


def _literal(v: str | None) -> str:
    return sql_str(v) if v is not None else "CAST(NULL AS VARCHAR)"


def _swe_agent(f: Facts) -> str:
    act = "rtrim(j->>'$.action', chr(10) || chr(13) || ' ')"
    out = "j->>'$.observation'"
    has = f"nullif({act}, '') IS NOT NULL"
    state = ("CASE WHEN json_type(j, '$.state') = 'VARCHAR' AND json_valid(j->>'$.state') "
             "THEN CAST(j->>'$.state' AS JSON) ELSE j->'$.state' END")
    return _select({
        "kind": f"CASE WHEN {has} THEN 'tool_call' ELSE 'record' END",
        "event_type": "'step'",
        "actor": sql_str(f.agent),
        "action": first_word(act),
        "args": f"CASE WHEN {has} THEN json_object('command', {act}) END",
        "result": _clip(out),
        "error": "err",
        "ok": f"CASE WHEN {has} THEN err IS NULL END",
        "latency_ms": "TRY_CAST(j->>'$.execution_time' AS DOUBLE) * 1000",
        "model": _literal(f.model),
        "extra": f"json_object('thought', left(j->>'$.thought', 500), 'state', {state})",
    }, f"(SELECT *, {error_sql(out, 'NULL')} AS err FROM j)")


# mini-swe-agent v1 writes the command in a fenced block of the assistant's text
_BLOCK = r"'(?s)```(?:bash|mswea_bash_command|sh)[ \t]*\n(.*?)\n```'"
_RETURNCODE = r"'<returncode>(-?[0-9]+)</returncode>'"
_OUTPUT = r"'(?s)<output>\n?(.*?)\n?</output>'"
_OUTPUT_LONG = r"'(?s)<output_head>\n?(.*?)</output_tail>'"
_ENV_ERROR = (r"'^(Please always provide EXACTLY ONE|Tool call error|Format error|"
              r"The last command [^\n]*timed out)'")


def _mini(f: Facts) -> str:
    args0 = "j->>'$.tool_calls[0].function.arguments'"
    command = (f"coalesce(j->>'$.extra.actions[0].command', "
               f"CASE WHEN json_valid({args0}) THEN CAST({args0} AS JSON)->>'$.command' END, "
               f"CASE WHEN prole = 'assistant' THEN nullif(regexp_extract(body, {_BLOCK}, 1), '') END)")
    usage = _usage("j->'$.extra.response.usage'")
    code = ("coalesce(TRY_CAST(j->>'$.extra.returncode' AS INTEGER), TRY_CAST(nullif("
            f"regexp_extract(body, {_RETURNCODE}, 1), '') AS INTEGER))")
    output = (f"coalesce(j->>'$.extra.raw_output', CASE WHEN contains(body, '<output>') "
              f"THEN regexp_extract(body, {_OUTPUT}, 1) WHEN contains(body, '<output_head>') "
              f"THEN regexp_extract(body, {_OUTPUT_LONG}, 1) ELSE body END)")
    agent = sql_str(f.agent)
    stamp = epoch_to_ts("TRY_CAST(j->>'$.extra.timestamp' AS DOUBLE)")
    created = epoch_to_ts("TRY_CAST(j->>'$.extra.response.created' AS DOUBLE)")
    iso = iso_to_ts("j->>'$.timestamp'")
    own_ts = f"coalesce({stamp}, {created}, {iso})"
    kind = ("CASE WHEN prole = 'assistant' AND cmd IS NOT NULL THEN 'tool_call' "
            "WHEN prole = 'assistant' AND (json_type(j, '$.extra.response.usage') = 'OBJECT' "
            "OR TRY_CAST(j->>'$.extra.cost' AS DOUBLE) IS NOT NULL) THEN 'llm_call' "
            "WHEN prole = 'tool' OR prev_call IS NOT NULL THEN 'response' "
            "WHEN prole IN ('assistant', 'user', 'system') THEN 'message' ELSE 'record' END")
    prev_call = ("CASE WHEN prole = 'user' AND lag(prole) OVER w = 'assistant' "
                 "AND lag(cmd) OVER w IS NOT NULL AND NOT lag(tools) OVER w THEN line - 1 END")
    first_user = "coalesce(min(CASE WHEN prole = 'user' THEN line END) OVER () = line, false)"
    source = f"""(SELECT *, {kind} AS k FROM (
          SELECT *, {prev_call} AS prev_call FROM (
            SELECT *, {command} AS cmd FROM (
              SELECT *, {_text('$.content')} AS body, j->>'$.role' AS prole,
                     {_has_list('$.tool_calls')} AS tools FROM j) c0) c1
          WINDOW w AS (ORDER BY line)) c2)"""
    return _select({
        "own_ts": own_ts,
        "kind": "k",
        "event_type": "prole",
        "actor": (f"CASE WHEN k = 'response' OR prole = 'assistant' THEN {agent} "
                  f"WHEN prole = 'system' THEN 'system' WHEN prole = 'user' AND {first_user} "
                  f"THEN 'user' WHEN prole = 'user' THEN 'environment' ELSE prole END"),
        "target": (f"CASE WHEN k = 'message' AND prole = 'assistant' THEN 'user' "
                   f"WHEN k = 'message' THEN {agent} END"),
        "role": "prole",
        "action": f"CASE WHEN k = 'tool_call' THEN {first_word('cmd')} END",
        "args": "CASE WHEN k = 'tool_call' THEN json_object('command', cmd) END",
        "result": f"CASE WHEN k = 'response' THEN {_clip(output)} END",
        "ok": (f"CASE WHEN k = 'response' THEN CASE WHEN {code} IS NOT NULL THEN {code} = 0 "
               f"ELSE {error_sql(output, 'NULL')} IS NULL END END"),
        "error": (f"CASE WHEN k = 'response' THEN {error_sql(output, code)} "
                  f"WHEN k = 'message' AND prole = 'user' AND regexp_matches(body, {_ENV_ERROR}) "
                  f"THEN {_first_line('body')} END"),
        "corr_id": ("CASE WHEN k = 'tool_call' THEN coalesce(j->>'$.tool_calls[0].id', "
                    "j->>'$.extra.actions[0].tool_call_id', 'step-' || CAST(line AS VARCHAR)) "
                    "WHEN k = 'response' THEN coalesce(j->>'$.tool_call_id', "
                    "'step-' || CAST(prev_call AS VARCHAR)) END"),
        **{c: f"CASE WHEN prole = 'assistant' THEN {e} END" for c, e in usage.items()},
        "cost_usd": "CASE WHEN prole = 'assistant' THEN TRY_CAST(j->>'$.extra.cost' AS DOUBLE) END",
        "model": (f"CASE WHEN prole = 'assistant' THEN coalesce(j->>'$.extra.response.model', "
                  f"{_literal(f.model)}) END"),
        "extra": ("json_object('calls', CASE WHEN k = 'tool_call' THEN greatest(coalesce("
                  "json_array_length(j, '$.tool_calls'), 0), coalesce(json_array_length(j, "
                  "'$.extra.actions'), 0), 1) END, 'text', CASE WHEN k IN ('message', "
                  "'llm_call') THEN left(body, 500) END)"),
    }, source)


def _openhands(f: Facts) -> str:
    act, obs, src = "j->>'$.action'", "j->>'$.observation'", "j->>'$.source'"
    meta = "j->'$.tool_call_metadata'"
    usage = _usage(f"{meta}->'$.model_response.usage'")
    code = ("coalesce(TRY_CAST(j->>'$.extras.metadata.exit_code' AS INTEGER), "
            "TRY_CAST(j->>'$.extras.exit_code' AS INTEGER))")
    out = "j->>'$.content'"
    silent = ("'change_agent_state', 'recall', 'think', 'finish', 'reject', 'null', "
              "'condensation', 'condensation_request', 'agent_state_changed', 'user_rejected'")
    kind = (f"CASE WHEN {act} IS NOT NULL THEN CASE WHEN {act} IN ('message', 'system') "
            f"THEN 'message' WHEN {act} IN ({silent}) THEN 'record' ELSE 'tool_call' END "
            f"WHEN {obs} IS NOT NULL AND j->>'$.cause' IS NOT NULL AND {obs} NOT IN ({silent}) "
            f"THEN 'response' ELSE 'record' END")
    command = "j->>'$.args.command'"
    success = "TRY_CAST(j->>'$.success' AS BOOLEAN)"
    drop = sql_str('{"thought": null, "translated_ipython_code": null}')
    return _select({
        "own_ts": iso_to_ts("j->>'$.timestamp'"),
        "kind": "k",
        "event_type": f"coalesce({act}, {obs})",
        "actor": f"CASE {src} WHEN 'agent' THEN {sql_str(f.agent)} ELSE {src} END",
        "target": (f"CASE WHEN k = 'message' THEN CASE WHEN {src} = 'agent' THEN 'user' "
                   f"ELSE {sql_str(f.agent)} END END"),
        "role": src,
        "action": (f"CASE WHEN k = 'tool_call' THEN CASE WHEN {act} = 'run' THEN "
                   f"{first_word(command)} ELSE coalesce({meta}->>'$.function_name', {act}) END END"),
        "args": (f"CASE WHEN k = 'tool_call' THEN CASE WHEN {act} = 'run' THEN "
                 f"json_object('command', {command}) ELSE CAST(json_merge_patch(j->'$.args', "
                 f"{drop}) AS VARCHAR) END END"),
        "result": f"CASE WHEN k = 'response' THEN {_clip(out)} END",
        "ok": (f"CASE WHEN k = 'response' THEN CASE WHEN {obs} = 'error' THEN false "
               f"WHEN {code} IS NOT NULL THEN {code} = 0 WHEN {success} IS NOT NULL "
               f"THEN {success} ELSE {error_sql(out, 'NULL')} IS NULL END END"),
        "error": (f"CASE WHEN k = 'response' THEN CASE WHEN {obs} = 'error' THEN coalesce("
                  f"{error_sql(out, 'NULL')}, {_first_line(out)}, 'error') "
                  f"ELSE {error_sql(out, code)} END END"),
        "corr_id": ("CASE WHEN k = 'tool_call' THEN j->>'$.id' "
                    "WHEN k = 'response' THEN j->>'$.cause' END"),
        **{c: f"CASE WHEN {act} IS NOT NULL THEN {e} END" for c, e in usage.items()},
        "model": f"CASE WHEN {act} IS NOT NULL THEN {meta}->>'$.model_response.model' END",
        "extra": (f"json_object('id', j->'$.id', 'response_id', CASE WHEN {act} IS NOT NULL "
                  f"THEN {meta}->>'$.model_response.id' END, 'calls', "
                  f"{meta}->'$.total_calls_in_response', 'message', "
                  "left(nullif(j->>'$.message', ''), 500))"),
    }, f"(SELECT *, {kind} AS k FROM j)")


def _autogen(f: Facts) -> str:
    typ = "j->>'$.type'"
    src = "coalesce(j->>'$.source', j->>'$.name')"
    first = "j->'$.content[0]'"
    out = f"{first}->>'$.content'"
    kind = (f"CASE WHEN {typ} = 'ToolCallRequestEvent' THEN 'tool_call' "
            f"WHEN {typ} = 'ToolCallExecutionEvent' THEN 'response' "
            f"WHEN {typ} LIKE '%Message' OR ({typ} IS NULL AND j->>'$.role' IS NOT NULL) "
            f"THEN 'message' ELSE 'record' END")
    is_error = f"coalesce(TRY_CAST({first}->>'$.is_error' AS BOOLEAN), false)"
    return _select({
        "own_ts": iso_to_ts("j->>'$.created_at'"),
        "kind": "k",
        "event_type": f"coalesce({typ}, j->>'$.role')",
        "actor": src,
        "target": f"CASE WHEN {typ} = 'HandoffMessage' THEN j->>'$.target' END",
        "role": "j->>'$.role'",
        "action": f"CASE WHEN k = 'tool_call' THEN {first}->>'$.name' END",
        "args": f"CASE WHEN k = 'tool_call' THEN {first}->>'$.arguments' END",
        "result": f"CASE WHEN k = 'response' THEN {_clip(out)} END",
        "ok": f"CASE WHEN k = 'response' THEN NOT {is_error} END",
        "error": (f"CASE WHEN k = 'response' AND {is_error} THEN coalesce("
                  f"{error_sql(out, 'NULL')}, {_first_line(out)}, 'error') END"),
        "corr_id": (f"CASE WHEN k = 'tool_call' THEN {first}->>'$.id' "
                    f"WHEN k = 'response' THEN {first}->>'$.call_id' END"),
        "tokens_in": "TRY_CAST(j->>'$.models_usage.prompt_tokens' AS BIGINT)",
        "tokens_out": "TRY_CAST(j->>'$.models_usage.completion_tokens' AS BIGINT)",
        "extra": ("json_object('calls', CASE WHEN k IN ('tool_call', 'response') THEN "
                  "json_array_length(j, '$.content') END, 'text', CASE WHEN k NOT IN "
                  f"('tool_call', 'response') THEN left({_text('$.content')}, 500) END)"),
    }, f"(SELECT *, {kind} AS k FROM j)")


_BUILD = {SWE_AGENT: _swe_agent, MINI: _mini, CHAT: _mini, OPENHANDS: _openhands,
          AUTOGEN: _autogen}


def sim_ts(index: str) -> str:
    """SQL: step `index` (0-based) as a time on the simulated clock, SIM_EPOCH + index s."""
    return (f"CAST(TIMESTAMP {sql_str(SIM_EPOCH)} + to_seconds(CAST({index} AS BIGINT)) "
            f"AS TIMESTAMP_MS)")


def select_sql(ctx: FormatContext) -> str:
    f = facts(ctx.path) or Facts(CHAT, _stem(ctx.path), "assistant", None)
    inner = _BUILD[f.flavour](f)
    clocked = ("coalesce(own_ts, last_value(own_ts IGNORE NULLS) OVER (ORDER BY line ROWS "
               "UNBOUNDED PRECEDING), first_value(own_ts IGNORE NULLS) OVER (ORDER BY line ROWS "
               "BETWEEN CURRENT ROW AND UNBOUNDED FOLLOWING))")
    return f"""
    WITH j AS (SELECT line, byte_offset, byte_length, text, CAST(text AS JSON) AS j FROM raw),
    m AS ({inner})
    SELECT line, byte_offset, byte_length, text, kind, event_type, actor, target, role,
      {sql_str(f.session)} AS session, action, args, result, ok, error, corr_id, tokens_in,
      tokens_out, tokens_cache_read, tokens_cache_write, cost_usd, latency_ms, model,
      coalesce({clocked}, {sim_ts('line - 1')}) AS ts,
      nullif(CAST(json_merge_patch('{{}}', coalesce(extra, '{{}}'), CASE WHEN count(own_ts) OVER () = 0
        THEN '{{"clock": "{CLOCK}"}}' ELSE '{{}}' END) AS VARCHAR), '{{}}') AS extra
    FROM m
    """


def finish(con: duckdb.DuckDBPyConnection, ctx: FormatContext) -> None:
    """Join each observation to its call; count a model response's usage once (OpenHands
    writes it on every call of the response); address AutoGen messages to the last other
    speaker; and drop the latency of a call on the simulated clock (steps a second apart
    say nothing of how long it took)."""
    pair_tool_results(con)
    f = facts(ctx.path)
    flavour = f.flavour if f else CHAT
    if flavour == OPENHANDS:
        con.execute("""
          UPDATE batch SET tokens_in = NULL, tokens_out = NULL, tokens_cache_read = NULL,
                           tokens_cache_write = NULL
          WHERE kind = 'tool_call' AND extra->>'$.response_id' IS NOT NULL
            AND line NOT IN (SELECT min(line) FROM batch WHERE kind = 'tool_call'
                             AND extra->>'$.response_id' IS NOT NULL
                             GROUP BY event_id >> 32, extra->>'$.response_id')""")
    if flavour in (AUTOGEN, CHAT):
        con.execute("""
          UPDATE batch SET target = t.target FROM (
            SELECT b.line, coalesce(
              (SELECT arg_max(o.actor, o.line) FROM batch o WHERE o.kind = 'message'
                 AND o.line < b.line AND o.actor IS DISTINCT FROM b.actor),
              (SELECT arg_min(o.actor, o.line) FROM batch o WHERE o.kind = 'message'
                 AND o.line > b.line AND o.actor IS DISTINCT FROM b.actor)) AS target
            FROM batch b WHERE b.kind = 'message' AND b.target IS NULL) t
          WHERE batch.line = t.line AND batch.target IS NULL""")
    if flavour != SWE_AGENT:
        con.execute(f"""UPDATE batch SET latency_ms = NULL WHERE kind = 'tool_call'
                        AND extra->>'$.clock' = '{CLOCK}'""")


FIELDS = frozenset({
    # SWE-agent steps
    "action", "observation", "response", "thought", "state", "execution_time", "query",
    "extra_info", "messages",
    # chat messages (mini-swe-agent, litellm's message fields, AutoGen 0.2)
    "role", "content", "tool_calls", "tool_call_id", "function_call", "provider_specific_fields",
    "reasoning_content", "thinking_blocks", "extra", "name", "refusal", "annotations", "audio",
    "timestamp", "cache_control", "agent", "message_type", "tool_responses",
    # OpenHands events
    "id", "source", "message", "cause", "args", "extras", "tool_call_metadata", "llm_metrics",
    "timeout", "success", "security_risk",
    # AutoGen AgentChat messages
    "type", "models_usage", "metadata", "created_at", "target", "context", "results",
    "request_id",
})


PROFILE = FormatProfile(simulated_clock=f"{CLOCK}: a trajectory that states no time has step "
                                        f"n at n seconds after {SIM_EPOCH} UTC")


FORMAT = Format(
    name="trajectory",
    description="whole-file JSON trajectories (SWE-agent .traj, mini-swe-agent .traj.json, "
                "OpenHands event lists, AutoGen message histories): one event per step, each "
                "call joined to its observation; no clock: step n at n s after "
                "2000-01-01 (simulated)",
    sniff=sniff,
    sniff_head=sniff_head,
    select_sql=select_sql,
    mapped_keys=FIELDS,
    finish=finish,
    records=records,
    priority=40,
    profile=PROFILE,
)
