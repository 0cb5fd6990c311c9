"""no_progress: an agent that keeps working and gets nowhere.

Real agents rarely loop by repeating one call to the letter, back to back (repeated_action's
shape). They restore a file from git or a backup, try another edit, look at the same lines,
run the same failing test and restore again; they retry a commit that a hook rejects while
the hook's message alternates between two checkers; they click the same button with a page
whose screenshot text differs a little each time. What these share is not identity but lack
of progress: over a stretch of its run, the agent's calls keep landing where they landed
before.

The model. Each call of an (actor, session) gets a *family* and an *outcome*:
- family: the call with its variable parts masked (ids, hashes, times, addresses) and its
  free text set aside (a commit message, a description, a comment), file paths and numbers
  kept (`sed -n '10,20p' a.py` and `sed -n '30,40p' a.py` are two calls; a batch over items
  17, 18, 19 is not one call repeated);
- outcome: failed or not, and the output with the same masks, plus fractional numbers (a
  test's 0.31 s) masked, integers kept (2 failed → 1 failed is progress).

Ways a stretch makes no progress, each a rule that says why:
- **revert**: the same file restored to the same state (`git checkout F`, `git restore F`,
  `cp F.bak F`, `mv F.orig F`), with the same answer, `min_restores` times or more, each
  restore within `max_gap` calls of the last. Whatever was done between two restores was
  thrown away by the second one.
- **retry**: the same call failing `min_failures` times or more, each within `max_gap`
  calls of the last, with at most a third as many distinct errors as failures (the
  hook's message alternates between two checkers: still the same two walls), and no success
  of that call between. A test whose failure changes every time (TDD) has as many errors as
  runs and is progress; `min_identical_failures` identical failures back to back are a retry
  too.
- **stated**: `min_stated` of a runtime's own progress checks in a row said the run was in a
  loop or not progressing (Magentic-One's ledger: `is_in_loop`, `is_progress_being_made`),
  where the format's profile names the key that carries them.
- **repeat**: the same successful call with the same outcome `min_repeats` times or more, where
  between two of them either at most `tight_gap` other calls came or most of what came
  between (`stale_share`) repeats calls already made in the stretch. A reproduction re-run
  after a real patch, with new work between, is progress; re-reading the same lines between
  the same two edits is not. Also `min_near_repeats` of the same call back to back whose
  answers differ only in numbers (a page scrolled on and on: the position moves, nothing else).

The calls are read per run: one actor in one session of one log file. The stretches the rules
find in a run that overlap are one finding.

Healthy look-alikes that stay quiet: a poll whose answer changes (the outcome differs, so
the chain breaks), a batch over distinct items (distinct families), TDD whose failures change
(distinct outcomes), a verification run repeated after real, new changes (stale share low),
two restores before the fix works (below `min_restores`).

- measure: the calls of each (actor, session), their families and outcomes, and the
  stretches the rules find (pure kernel: `stretches`);
- judge: medium from the rules' minimums, high from `high_count` key calls;
- describe: what repeated, how often, over which lines, and what changed in between.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import re
from collections import Counter
from dataclasses import dataclass, field

import duckdb

from ..db import sql_literal
from ..vocabulary import Severity
from .base import Detector, EvidenceLine, Finding, human_duration, param, staged
from .profiles import extra_key_sql

KINDS = ("tool_call", "step")
# the longest cycle of identical calls alternating_action finds (its `max_cycle`)
MAX_CYCLE = 4
# what another party says to an actor: a new instruction, after which a repeat may be news
TOLD_KINDS = ("message", "room_post", "request", "trigger")


@dataclass
class Params:
    min_restores: int = param(3, "restores of one file to the same state that make a revert cycle")
    min_failures: int = param(4, "failures of one call, with few distinct errors, that make a retry "
                                 "loop")
    min_identical_failures: int = param(3, "identical failures of one call with nothing else between "
                                           "(in the actor's own calls) that make a retry loop")
    min_repeats: int = param(4, "the same call with the same outcome, without progress between, that "
                                "make a repeat loop")
    min_near_repeats: int = param(6, "the same call made back to back whose answers differ only in "
                                     "numbers (a scroll position, a count) that make a repeat loop")
    defer_identical: int = param(5, "identical failures of one call from which the retry is left to "
                                    "repeated_error's retry run (its `retry_min_count`), which "
                                    "explains it best")
    max_gap: int = param(30, "most other calls between two links of a revert or retry chain")
    tight_gap: int = param(3, "between two repeats of a call, at most this many other calls are no "
                              "progress whatever they are")
    stale_share: float = param(0.6, "between two repeats further apart, the share of calls that repeat "
                                    "one already made in the stretch for it to be no progress")
    max_stale_gap: int = param(12, "most other calls between two repeats of a call for them to be one "
                                   "chain, however stale")
    min_stated: int = param(3, "a runtime's own progress checks in a row saying its run is looping or "
                               "not progressing (Magentic-One's ledger) that make a finding")
    high_count: int = param(8, "key calls (restores, failures, repeats) that make a finding high")


# ---------------------------------------------------------------------------------------------
# families: what a call is, what it got (pure)

# (pattern, token) in order; plain RE2 syntax that Python's `re` (ASCII) reads the same way, so
# that the outcome's masking runs in DuckDB over every call at once (OUTCOME_SQL) and in Python
# for the kernel's tests alike (`outcome_text`)
MASKS: tuple[tuple[str, str], ...] = (
    (r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}", "<UUID>"),
    (r"[0-9]{4}-[0-9]{2}-[0-9]{2}[T ][0-9]{2}:[0-9]{2}:[0-9]{2}(?:[.,][0-9]+)?(?:Z|[+-][0-9]{2}:?[0-9]{2})?",
     "<TS>"),
    (r"\b[0-9]{1,2}:[0-9]{2}:[0-9]{2}(?:[.,][0-9]+)?\b", "<TIME>"),
    (r"\b[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}(?::[0-9]+)?\b", "<IP>"),
    (r"\b0x[0-9a-fA-F]+\b", "<ADDR>"),
    # a hex word with letters and digits: a commit, a hash, an id (all digits is a number)
    (r"\b(?:[0-9]+[a-fA-F]|[a-fA-F]+[0-9])[0-9a-fA-F]*\b", "<HEX>"),
    (r"/tmp/[^ \t\n\r\f\v'\"]+", "<TMP>"),
)
# what varies between two runs of the same outcome besides: durations
DURATIONS: tuple[tuple[str, str], ...] = (
    (r"[0-9]+\.[0-9]+[ \t]*(?:ms|sec|seconds|secs|us|ns|min|s|m)?\b", "<DUR>"),
    (r"\b[0-9]+[ \t]*(?:ms|us|ns|sec|secs|seconds)\b", "<DUR>"),
    (r"[ \t\n\r\f\v]+", " "),
)
NUMBERS = (r"[0-9]+", "<N>")
_COMPILED = tuple((re.compile(p, re.ASCII), t) for p, t in MASKS)
_COMPILED_OUTCOME = _COMPILED + tuple((re.compile(p, re.ASCII), t) for p, t in DURATIONS)
_NUMBER = re.compile(NUMBERS[0])
_SPACE = re.compile(r"\s+")
# where an agent's command keeps free text: a commit message, a PR body, an echo's text
_MESSAGE_OPT = re.compile(r"""(-m|--message|--body|--title|-t|--description)(\s+|=)"""
                          r"""("(?:[^"\\]|\\.)*"|'[^']*')""")
_HEREDOC = re.compile(r"<<-?\s*(['\"]?)(\w+)\1(.*?)\n\2\b", re.S)
_PREFIX = re.compile(r"^\s*(?:(?:cd\s+[^;&|\n]+?\s*(?:&&|;)|[A-Za-z_][A-Za-z0-9_]*=\S*)\s*)+")
# argument keys of tool calls that hold free text, not what the call does
FREE_TEXT_KEYS = frozenset({"description", "message", "comment", "reason", "explanation", "thought",
                            "title", "summary", "commit_message", "justification", "rationale"})
# a restore: the file put back as it was (from git or a backup copy)
_GIT_RESTORE = re.compile(r"\bgit\s+(?:checkout(?:\s+HEAD)?\s+(?:--\s+)?|restore\s+(?:--\S+\s+)*)"
                          r"((?:[\w./-]+\.\w+|[\w.-]+/[\w./-]+)(?:\s+(?:[\w./-]+\.\w+|[\w.-]+/[\w./-]+))*)")
_COPY_BACK = re.compile(r"\b(?:cp|mv)\s+(?:-\w+\s+)*(\S+)\s+(\S+)")
_BACKUP_WORD = re.compile(r"(?i)(?:\.|_|-|~|^|/)(?:bak|backup|orig|original|save|saved|old|copy)\w*"
                          r"(?:\.\w+)?$|~$")


_BACKUP_FOLDER = re.compile(r"(?i)(?:^|/)[^/]*(?:bak|backup|orig|saved?)[^/]*/")


def _masked(text: str) -> str:
    for pattern, token in _COMPILED:
        text = pattern.sub(token, text)
    return text


def outcome_text(error: str | None, result: str | None) -> str:
    """What a call got, as outcomes are compared: ids, addresses, times and durations masked,
    white space made one space (`outcome_text_sql` in DuckDB gives the same text)."""
    text = f"{error or ''}\x1f{result or ''}"
    for pattern, token in _COMPILED_OUTCOME:
        text = pattern.sub(token, text)
    return text.strip(" ")


def outcome_text_sql(error: str, result: str) -> str:
    """SQL: `outcome_text` of the columns `error` and `result`."""
    out = f"coalesce({error}, '') || chr(31) || coalesce({result}, '')"
    for pattern, token in MASKS + DURATIONS:
        out = f"regexp_replace({out}, {sql_literal(pattern)}, {sql_literal(token)}, 'g')"
    return f"trim({out}, ' ')"


def command_of(args: str | None) -> str | None:
    """The command a call ran, when its arguments are a shell command (`{"command": ...}`,
    `{"cmd": [...]}`), else None."""
    if not args:
        return None
    try:
        parsed = json.loads(args)
    except ValueError:
        return None
    if isinstance(parsed, dict):
        cmd = parsed.get("command", parsed.get("cmd"))
        if isinstance(cmd, list) and all(isinstance(c, str) for c in cmd):
            # Codex: ["bash", "-lc", "the command"]
            return cmd[-1] if len(cmd) >= 3 and cmd[1] in ("-lc", "-c") else " ".join(cmd)
        return cmd if isinstance(cmd, str) else None
    return None


def shell_family(cmd: str) -> str:
    """A shell command as a family: its `cd DIR &&` prefix, free text (commit messages, a
    heredoc's body is kept: it is the edit) and ids masked away."""
    cmd = _PREFIX.sub("", cmd.strip())
    cmd = _MESSAGE_OPT.sub(lambda m: f"{m.group(1)} <TEXT>", cmd)
    cmd = _HEREDOC.sub(lambda m: f"<<{m.group(2)} #{_digest(m.group(3))}", cmd)
    return _SPACE.sub(" ", _masked(cmd)).strip()


def call_family(action: str | None, args: str | None) -> str:
    """What a call is, for comparing calls that vary only in what does not matter."""
    cmd = command_of(args)
    if cmd is not None:
        return f"{action or ''}\x1f{shell_family(cmd)}"
    try:
        parsed = json.loads(args) if args else None
    except ValueError:
        parsed = None
    if isinstance(parsed, dict):
        kept = {k: v for k, v in sorted(parsed.items()) if k not in FREE_TEXT_KEYS}
        body = json.dumps(kept, sort_keys=True, default=str)
    else:
        body = args or ""
    return f"{action or ''}\x1f{_SPACE.sub(' ', _masked(body)).strip()}"


_SEGMENT = re.compile(r"\s*(?:&&|\|\||;)\s*")
_PATHLIKE = re.compile(r"^(?:[\w.~-]*(?:/[\w.@+-]+)+/?|[\w@+-]+\.[A-Za-z]\w{0,5})(?::\d+)*$")
PATH_KEYS = ("file_path", "path", "filename", "file", "notebook_path", "url", "target_file")


def retry_family(action: str | None, args: str | None) -> str:
    """A call as a retry of it is recognised: the programs it runs (with a subcommand), the
    paths it names and its quoted arguments (a search pattern), options and free text (a
    commit message, a heredoc) dropped (`python repro.py` and `python repro.py 2>&1 |
    head`, `git commit -m A` and `git commit --no-verify -m B` are one call retried); a tool
    call by its tool and the file or address it acts on."""
    cmd = command_of(args)
    if cmd is None:
        try:
            parsed = json.loads(args) if args else None
        except ValueError:
            parsed = None
        where = [str(parsed[k]) for k in PATH_KEYS if isinstance(parsed, dict) and k in parsed]
        return f"{action or ''}\x1f" + ("\x1f".join(where) if where else call_family(action, args))
    words = []
    body = _HEREDOC.sub(" ", _MESSAGE_OPT.sub(" ", _PREFIX.sub("", cmd.strip())))
    for segment in _SEGMENT.split(body):
        # what a pipe feeds the output through (head, grep) is not the call, but what it looks
        # for is (a grep's pattern: its exit code is the pipeline's)
        first, _, piped = segment.partition("|")
        words += [t for t in piped.split() if t[:1] in "'\""]
        tokens = [t for t in first.split() if not re.match(r"^[0-9]*[<>&]", t)]
        if not tokens:
            continue
        words.append(tokens[0].rsplit("/", 1)[-1])
        if len(tokens) > 1 and re.match(r"^[a-z][\w-]*$", tokens[1]) and not _PATHLIKE.match(tokens[1]):
            words.append(tokens[1])
        words += [t for t in tokens[1:] if _PATHLIKE.match(t.strip("'\"")) or t[:1] in "'\""]
    return f"{action or ''}\x1f{_masked(' '.join(words))}"


def outcome_family(failed: bool, error: str | None, result: str | None) -> str:
    """What a call got: failed or not, and what it said, with the parts that vary from run to
    run of the same outcome masked (ids, addresses, times, durations); integers are kept, as a
    count that changes is news."""
    return ("F" if failed else "S") + _digest(outcome_text(error, result))


def rough_outcome(failed: bool, error: str | None, result: str | None) -> str:
    """The outcome with every number masked as well: answers that differ only in a position or
    a count compare equal."""
    return ("F" if failed else "S") + _digest(_NUMBER.sub(NUMBERS[1], outcome_text(error, result)))


def restored_file(cmd: str | None) -> str | None:
    """The file a shell command puts back as it was (`git checkout F`, `git restore F`,
    `cp F.bak F`, `mv F.orig F`), else None."""
    if not cmd:
        return None
    body = _PREFIX.sub("", cmd)
    m = _GIT_RESTORE.search(body)
    if m and not re.search(r"\bgit\s+checkout\s+-[bB]\b", body):
        return " ".join(sorted(m.group(1).split()))
    for m in _COPY_BACK.finditer(body):
        src, dst = m.group(1).strip("'\""), m.group(2).strip("'\"")
        if src == dst:
            continue
        dst_name = dst.rstrip("/").rsplit("/", 1)[-1]
        src_name = src.rsplit("/", 1)[-1]
        if dst.endswith("/"):
            dst, dst_name = dst + src_name, src_name
        suffixed = (src_name.startswith(dst_name) and src_name != dst_name
                    and _BACKUP_WORD.search(src_name[len(dst_name):]))
        renamed = (_BACKUP_WORD.search(src_name) and not _BACKUP_WORD.search(dst_name)
                   and src_name.split(".")[0].startswith(dst_name.split(".")[0]))
        from_folder = src_name == dst_name and _BACKUP_FOLDER.search(src)
        if suffixed or renamed or from_folder:
            return dst
    return None


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


# ---------------------------------------------------------------------------------------------
# the kernel: stretches without progress in one actor's calls (pure)


@dataclass(frozen=True)
class Call:
    """One call of an actor in a session, as the rules read it."""

    family: str
    outcome: str
    failed: bool
    restores: str | None = None  # the file it puts back as it was
    # whether the log says what the call returned: "the same outcome" is claimed only then
    known: bool = True
    rough: str = ""  # the outcome with every number masked too
    retry: str = ""  # the call as its retries are recognised (retry_family)
    told: bool = False  # someone else told the actor something since its previous call


@dataclass
class Stretch:
    """A stretch of an actor's calls in which it made no progress, and why."""

    rule: str  # revert, retry, repeat: the rule that says most about why
    key: list[int]  # the indexes of the calls that say so (its restores, failures, repeats)
    subject: int  # the index of a call that shows what repeated (the first key call)
    outcomes: int  # distinct outcomes of the key calls
    lo: int = 0
    hi: int = 0
    also: dict[str, int] = field(default_factory=dict)  # other rules over the stretch: their counts
    # a one-shape detector says it best (repeated_error's retry run): the stretch is left to it
    deferred: bool = False

    def __post_init__(self) -> None:
        self.lo, self.hi = min(self.key), max(self.key)

    @property
    def rules(self) -> set[str]:
        return {self.rule, *self.also}

    def absorb(self, other: Stretch) -> None:
        """Take in an overlapping stretch: the same rule's key calls join these; another rule
        that says more about why becomes this stretch's, and the one it replaces is noted."""
        self.lo, self.hi = min(self.lo, other.lo), max(self.hi, other.hi)
        self.deferred = self.deferred or other.deferred
        if other.rule == self.rule:
            self.key = sorted(set(self.key) | set(other.key))
            self.outcomes = max(self.outcomes, other.outcomes)
            return
        if _RULE_ORDER[other.rule] < _RULE_ORDER[self.rule]:
            self.also[self.rule] = max(self.also.get(self.rule, 0), len(self.key))
            self.rule, self.key, self.subject, self.outcomes = (other.rule, other.key, other.subject,
                                                                other.outcomes)
        else:
            self.also[other.rule] = max(self.also.get(other.rule, 0), len(other.key))


def _chains(indexes: list[int], max_gap: int) -> list[list[int]]:
    """`indexes` (ascending) cut where two neighbours are more than `max_gap` calls apart."""
    out: list[list[int]] = []
    for i in indexes:
        if out and i - out[-1][-1] - 1 <= max_gap:
            out[-1].append(i)
        else:
            out.append([i])
    return out


def _reverts(calls: list[Call], p: Params) -> list[Stretch]:
    by_file: dict[tuple[str, str], list[int]] = {}
    for i, c in enumerate(calls):
        if c.restores and not c.failed:
            by_file.setdefault((c.restores, c.outcome), []).append(i)
    out = []
    for idx in by_file.values():
        for chain in _chains(idx, p.max_gap):
            # a restore right after a restore undoes nothing: count the rounds
            rounds = [i for k, i in enumerate(chain) if k == 0 or i - chain[k - 1] > 1]
            if len(rounds) >= p.min_restores and not _same_round_again(calls, rounds):
                out.append(Stretch("revert", rounds, rounds[0], 1))
    return out


def _same_round_again(calls: list[Call], rounds: list[int]) -> bool:
    """Whether every round between two restores is the same few calls with the same answers
    (restore, the same edit, the same failing test): a cycle of identical calls, which
    alternating_action finds and says best. A revert cycle is the one whose tries differ."""
    between = {tuple((calls[k].family, calls[k].outcome) for k in range(a + 1, b))
               for a, b in zip(rounds, rounds[1:], strict=False)}
    return len(between) == 1 and len(next(iter(between))) < MAX_CYCLE


def _retries(calls: list[Call], p: Params) -> list[Stretch]:
    by_family: dict[str, list[int]] = {}
    for i, c in enumerate(calls):
        by_family.setdefault(c.retry or c.family, []).append(i)
    out = []
    for idx in by_family.values():
        # the family's runs of failures: a success of the same call ends one
        runs: list[list[int]] = [[]]
        for i in idx:
            if calls[i].failed:
                runs[-1].append(i)
            elif runs[-1]:
                runs.append([])
        for run in runs:
            for chain in _chains(run, p.max_gap):
                walls = Counter(calls[i].rough for i in chain)
                errors, most = len(walls), max(walls.values())
                few = len(chain) >= p.min_failures and most >= max(3, (len(chain) + 1) // 2)
                same_in_a_row = (len(chain) >= p.min_identical_failures and errors == 1
                                 and chain[-1] - chain[0] == len(chain) - 1)
                # the same call failing the same way, again and again, is repeated_error's
                # retry run: it says it best
                theirs = len({calls[i].outcome for i in chain}) == 1 and len(chain) >= p.defer_identical
                if (few or same_in_a_row) and not _poll_that_ended(calls, chain, p):
                    out.append(Stretch("retry", chain, chain[0], errors, deferred=theirs))
    return out


def _repeats(calls: list[Call], p: Params) -> list[Stretch]:
    by_pair: dict[tuple[str, str], list[int]] = {}
    for i, c in enumerate(calls):
        if c.known and not c.failed:  # a failure again is a retry: `_retries` reads those
            by_pair.setdefault((c.family, c.outcome), []).append(i)
    out = []
    for idx in by_pair.values():
        if len(idx) < p.min_repeats:
            continue
        chains = _repeat_chains(calls, idx, p)
        out += [Stretch("repeat", c, c[0], 1) for c in chains
                if len(c) >= p.min_repeats and not _poll_that_ended(calls, c, p)]
    return out


def _repeat_chains(calls: list[Call], idx: list[int], p: Params) -> list[list[int]]:
    """The repeats `idx` of one call and outcome cut into chains whose links are stale. The
    families made since a chain began are kept as it grows (`seen`), so a long chain costs
    its length, not its square."""
    chains: list[list[int]] = [[idx[0]]]
    seen = {calls[idx[0]].family}
    for i in idx[1:]:
        chain = chains[-1]
        # the first link has nothing before it to be stale against: it is taken on trust
        # when near, and the chain then stands or falls by the links after it
        first_link = len(chain) == 1 and i - chain[-1] - 1 <= p.max_stale_gap
        if first_link or _stale_between(calls, seen, chain[-1], i, p):
            chain.append(i)
        elif len(chain) == 2 and _stale_between(calls, {calls[chain[1]].family}, chain[1], i, p):
            chains[-1] = [chain[1], i]  # the trusted link was not; the next one is
            seen = {calls[chain[1]].family}
        else:
            chains.append([i])
            seen = set()
        seen.update(calls[k].family for k in range(chains[-1][-2] if len(chains[-1]) > 1 else i, i + 1))
    return chains


def _near_repeats(calls: list[Call], p: Params) -> list[Stretch]:
    """Runs of the same call made back to back whose answers differ only in numbers: a page
    scrolled again and again, a counter that moves while nothing else does."""
    out = []
    start = 0
    for i in range(1, len(calls) + 1):
        if i < len(calls) and calls[i].known and not calls[i].failed and (
                calls[start].known and not calls[start].failed) and (
                calls[i].family, calls[i].rough) == (calls[start].family, calls[start].rough):
            continue
        run = list(range(start, i))
        if len(run) >= p.min_near_repeats and not _poll_that_ended(calls, run, p):
            out.append(Stretch("repeat", run, run[0], len({calls[k].outcome for k in run})))
        start = i
    return out


def _poll_that_ended(calls: list[Call], chain: list[int], p: Params) -> bool:
    """Whether a chain of the same call, made back to back, is a poll that got its news: the
    same call soon after with another answer, not a failure (the build finished, the export
    is ready)."""
    if chain[-1] - chain[0] != len(chain) - 1:
        return False
    family, outcome = calls[chain[0]].family, calls[chain[0]].outcome
    for c in calls[chain[-1] + 1: chain[-1] + 2 + p.tight_gap]:
        if c.family == family:
            return c.outcome != outcome and not c.failed
    return False


def _stale_between(calls: list[Call], seen: set[str], last: int, nxt: int, p: Params) -> bool:
    """Whether nothing between the repeats `last` and `nxt` of one call was progress: few
    calls, or mostly calls of families already made in the stretch (`seen`, or earlier in
    the gap itself)."""
    between = range(last + 1, nxt)
    if len(between) <= p.tight_gap:
        return True
    if len(between) > p.max_stale_gap:
        return False
    fresh: set[str] = set()
    stale = 0
    for i in between:
        family = calls[i].family
        if family in seen or family in fresh:
            stale += 1
        fresh.add(family)
    return stale >= p.stale_share * len(between)


def stretches(calls: list[Call], p: Params) -> list[Stretch]:
    """The stretches of `calls` (one actor's, in one session, in order) without progress,
    those that overlap merged into one, named and counted by the rule that says most."""
    found = sorted(_reverts(calls, p) + _retries(calls, p) + _repeats(calls, p)
                   + _near_repeats(calls, p),
                   key=lambda s: (s.lo, s.hi))
    merged: list[Stretch] = []
    for s in found:
        if merged and s.lo <= merged[-1].hi:
            merged[-1].absorb(s)
        else:
            merged.append(s)
    return [m for m in merged if not m.deferred and not _plain_cycle(calls, m.lo, m.hi)]


def _plain_cycle(calls: list[Call], lo: int, hi: int) -> bool:
    """Whether calls lo..hi are the same successful call, or the same few calls in the same
    order, with the same answers every time round, and nobody told the actor anything
    meanwhile: what repeated_action and alternating_action find and say best."""
    if any(calls[j].told for j in range(lo + 1, hi + 1)):
        return False
    pairs = [(c.family, c.outcome) for c in calls[lo:hi + 1]]
    # one call failing again and again is a retry: repeated_error's only from `defer_identical`
    first = 1 if not calls[lo].failed else 2
    return any(len(pairs) >= 2 * k and all(pairs[j] == pairs[j - k] for j in range(k, len(pairs)))
               for k in range(first, MAX_CYCLE + 1))


def stated_runs(stalled: list[bool], min_stated: int) -> list[list[int]]:
    """The runs of at least `min_stated` consecutive progress checks (one actor's, in order)
    that said the run was stalled."""
    out: list[list[int]] = []
    run: list[int] = []
    for i, flag in enumerate([*stalled, False]):
        if flag:
            run.append(i)
            continue
        if len(run) >= min_stated:
            out.append(run)
        run = []
    return out


# which rule names a merged stretch: a revert says most about why, a repeat least
_RULE_ORDER = {"revert": 0, "retry": 1, "repeat": 2, "stated": 3}


# ---------------------------------------------------------------------------------------------
# measure

# the calls, with what they got masked here (DuckDB, every core) and hashed: the outcome and
# the rough outcome (numbers masked too), as `outcome_family` and `rough_outcome` make them
CALLS = f"""
SELECT event_id, actor, session, ts, file, line, action, args, left(result, 400), ok, error,
       failed, known,
       CASE WHEN failed THEN 'F' ELSE 'S' END || left(sha256(o), 16) AS outcome,
       CASE WHEN failed THEN 'F' ELSE 'S' END
         || left(sha256(regexp_replace(o, {sql_literal(NUMBERS[0])}, {sql_literal(NUMBERS[1])}, 'g')), 16)
         AS rough
       , told_so_far
FROM (SELECT *, {outcome_text_sql('error', 'result')} AS o,
             error IS NOT NULL OR ok IS NOT DISTINCT FROM false AS failed,
             result IS NOT NULL OR error IS NOT NULL AS known,
             -- what others told the actor in its session so far (a prompt, an instruction)
             (SELECT count(*) FROM events t WHERE list_contains({list(TOLD_KINDS)}, t.kind)
                AND t.target = c.actor AND t.session IS NOT DISTINCT FROM c.session
                AND t.actor IS DISTINCT FROM c.actor AND t.ts <= c.ts) AS told_so_far
      FROM events c WHERE list_contains({list(KINDS)}, kind) AND actor IS NOT NULL AND ts IS NOT NULL
        AND (action IS NOT NULL OR args IS NOT NULL))
-- an (actor, session) none of whose rules could hold: fewer than three calls with a known
-- outcome (a simulation's steps that log no result) is not read into Python at all
QUALIFY count(*) FILTER (WHERE known) OVER (PARTITION BY actor, session, file) >= 3
ORDER BY actor, session NULLS FIRST, file, ts, event_id
"""


@dataclass
class Stall:
    """A stretch without progress, with what a reader needs of it."""

    actor: str
    session: str | None
    rule: str
    also: dict[str, int]  # other rules that saw the stretch, with their counts
    count: int  # key calls
    calls: int  # calls in the stretch, key calls included
    outcomes: int
    action: str | None
    what: str  # the call that repeated, as the log gives it (clipped)
    said: str | None  # what it got (clipped)
    restored: str | None
    ids: list[int]  # event ids of the key calls
    evidence: list[tuple[str, int]]  # file, line of the key calls
    start: dt.datetime
    stop: dt.datetime
    new_between: int  # distinct calls between the key calls not made before in the stretch
    other_between: int  # calls between the key calls


# what a runtime's own progress checks said (formats whose profile names a `stalled_key`)
STATED = f"""
SELECT event_id, actor, session, ts, file, line, stalled FROM (
  SELECT *, {extra_key_sql('stalled_key')} AS stalled FROM events
  WHERE kind = 'record' AND actor IS NOT NULL AND ts IS NOT NULL)
WHERE stalled IS NOT NULL
ORDER BY actor, session NULLS FIRST, file, ts, event_id
"""


def _groups(rows: list[tuple]) -> list[list[tuple]]:
    """`rows` (sorted by actor, session and file: the 2nd, 3rd and 5th columns) cut per run: an
    actor's calls in one session of one log (two copies of a transcript are two runs, not one
    run of every call twice)."""
    out: list[list[tuple]] = []
    for row in rows:
        if out and out[-1][0][1:3] == row[1:3] and out[-1][0][4] == row[4]:
            out[-1].append(row)
        else:
            out.append([row])
    return out


def measure(con: duckdb.DuckDBPyConnection, p: Params) -> list[Stall]:
    out: list[Stall] = []
    for group in _groups(con.execute(CALLS).fetchall()):
        out += _stalls_of(group, p)
    for group in _groups(con.execute(STATED).fetchall()):
        out += _stated_of(group, p)
    out.sort(key=lambda s: (s.start, s.actor, str(s.session), s.rule))
    return out


def _stated_of(rows: list[tuple], p: Params) -> list[Stall]:
    out = []
    for run in stated_runs([r[6] == "true" for r in rows], p.min_stated):
        first, last = rows[run[0]], rows[run[-1]]
        out.append(Stall(
            actor=first[1], session=first[2], rule="stated", also={}, count=len(run),
            calls=len(run), outcomes=1, action=None, what="", said=None, restored=None,
            ids=[rows[i][0] for i in run], evidence=[(rows[i][4], rows[i][5]) for i in run],
            start=first[3], stop=last[3], new_between=0, other_between=0))
    return out


def _stalls_of(rows: list[tuple], p: Params) -> list[Stall]:
    calls = []
    told_before = rows[0][15]
    for row in rows:
        action, args, failed, known, outcome, rough, told = row[6], row[7], *row[11:16]
        calls.append(Call(call_family(action, args), outcome, failed,
                          restored_file(command_of(args)), known=known, rough=rough,
                          retry=retry_family(action, args), told=told > told_before))
        told_before = told
    out = []
    for s in stretches(calls, p):
        key = s.key
        first = rows[s.subject]
        families_before: set[str] = set()
        new = 0
        for i in range(s.lo, s.hi + 1):
            if i not in key and calls[i].family not in families_before:
                new += 1
            families_before.add(calls[i].family)
        out.append(Stall(
            actor=first[1], session=first[2], rule=s.rule, also=dict(s.also), count=len(key),
            calls=s.hi - s.lo + 1, outcomes=s.outcomes, action=first[6],
            what=command_of(first[7]) or first[7] or first[6] or "",
            said=first[10] or first[8], restored=calls[s.subject].restores,
            ids=[rows[i][0] for i in key], evidence=[(rows[i][4], rows[i][5]) for i in key],
            start=rows[s.lo][3], stop=rows[s.hi][3], new_between=new,
            other_between=s.hi - s.lo + 1 - len(key)))
    return out


# ---------------------------------------------------------------------------------------------
# judge


def judge(s: Stall, p: Params) -> Severity | None:
    return Severity.HIGH if s.count >= p.high_count else Severity.MEDIUM


# ---------------------------------------------------------------------------------------------
# describe


def _clip(text: str | None, n: int) -> str:
    text = _SPACE.sub(" ", text or "").strip()
    return text if len(text) <= n else text[: n - 1] + "…"


# how another rule that saw a stretch reads in its summary
_ALSO = {"revert": "a file restored to the same state", "retry": "a call failing the same few ways",
         "repeat": "a call with the same outcome", "stated": "the run's own check saying it was stuck"}


def describe(s: Stall, severity: Severity, p: Params) -> Finding:
    where = f" in session {s.session}" if s.session else ""
    what = _clip(s.what, 100)
    span = human_duration((s.stop - s.start).total_seconds())
    between = (f"{s.other_between:,} other call{'s' if s.other_between != 1 else ''} came between, "
               f"{s.new_between:,} of them new to the stretch" if s.other_between
               else "nothing came between")
    if s.rule == "revert":
        title = f"{s.actor} restored {s.restored} {s.count:,} times{where}"
        why = (f"{s.actor} put {s.restored} back as it was {s.count:,} times (`{what}`, the same answer "
               f"each time) over {span}; {between}, and each restore threw away what was tried since "
               "the last: a revert-and-retry cycle that makes no progress")
    elif s.rule == "retry":
        errors = "the same error" if s.outcomes == 1 else f"only {s.outcomes} distinct errors"
        title = f"`{_clip(s.what, 60)}` failed {s.count:,} times{where}"
        why = (f"{s.actor} ran `{what}` {s.count:,} times over {span} and it failed every time with "
               f"{errors} ({_clip(s.said, 100)!r} first); {between}, and none of it got the call "
               "past the failure")
    elif s.rule == "stated":
        title = f"{s.actor} judged {s.count:,} times in a row that the run was stuck{where}"
        why = (f"{s.actor}'s own progress checks said {s.count:,} times in a row, over {span}, that "
               "the run was in a loop or making no progress, and it went on: the log states the "
               "stall itself")
    else:
        title = f"`{_clip(s.what, 60)}` made {s.count:,} times with the same outcome{where}"
        why = (f"{s.actor} made `{what}` {s.count:,} times over {span} and got the same outcome "
               f"each time; {between}: the stretch kept landing where it had been")
    also = "; ".join(f"{_ALSO[rule]} {n:,} times" for rule, n in sorted(s.also.items()))
    summary = why + (f". Over the same stretch: {also}" if also else "") + "."
    evidence = [EvidenceLine(f, ln, f"{s.rule} {k + 1} of {s.count}")
                for k, (f, ln) in enumerate(s.evidence)]
    return Finding(
        detector="no_progress",
        key=f"{s.actor}|{s.session}|{s.rule}|{s.start:%Y-%m-%dT%H:%M:%S.%f}",
        severity=severity, title=title, summary=summary,
        signal=f"{s.count:,} calls without progress ({s.rule})",
        recommendation=("Make the agent notice that it is back where it was: count, per session, "
                        "restores of one file, failures of one command and calls that got an "
                        "answer already seen, and stop or escalate at the third (a PreToolUse hook "
                        "in Claude Code; a wrapper around the tool elsewhere). Ask it to say what "
                        "it will do differently before it retries."),
        start=s.start, end=s.stop, actors=[s.actor], targets=[],
        sessions=[s.session] if s.session else [],
        claim_sql="SELECT event_id FROM events WHERE event_id IN (SELECT unnest($ids))",
        claim_params={"ids": s.ids},
        unit_kinds=KINDS,
        details={"rule": s.rule, "also": dict(sorted(s.also.items())), "count": s.count,
                 "calls_in_stretch": s.calls, "distinct_outcomes": s.outcomes,
                 "calls_between": s.other_between, "new_calls_between": s.new_between,
                 "call": _clip(s.what, 400), "answer": _clip(s.said, 400),
                 "restored": s.restored, "duration_s": (s.stop - s.start).total_seconds()},
        evidence=evidence, evidence_limit=max(5, len(evidence)),
    )


DETECTOR = Detector(
    name="no_progress",
    description="an agent working without progress: restoring one file again and again, a call "
                "failing with the same few errors, the same calls landing on the same outcome",
    params=Params,
    run=staged(measure, judge, describe),
    # the detectors of one shape (repeated_action, repeated_error) explain their loops best
    rank=32,
    max_severity="high",
    reads=(*KINDS, "record"),
    needs=(("ts",), ("action", "args"), ("actor",)),
    partition_by=("session",),
    # it holds each (actor, session)'s calls in Python
    grows_with_log=True,
)
