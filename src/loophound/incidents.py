"""Incidents: one story per loop.

A runaway loop is usually seen by several detectors at once (a retry storm is a run of one
error, a rate spike and an unusual actor), and a long loop can come out in pieces (a storm
interrupted by a few stray successes is several runs of the same error). An incident is the
loop: the findings that describe the same participants over the same stretch of time, merged
by the rules below, which read what findings say (who, where, when, which events), never
which detector made them. The grouping is pure: findings in (their `loophound.findings/v1`
dicts, with what attribution knows of the events they claim), incidents out.

1. Pieces of one run. Findings of one detector with the same actors, targets and sessions,
   in a file in common, whose spans overlap or lie at most `gap_s` apart, are one run of the
   loop. Each gap between two pieces is an interruption, counted (and its seconds summed).
2. The same loop. Two runs describe the same loop when all of these hold: they claim events
   in a file in common; their spans overlap or lie at most `gap_s` apart; their actors do not
   contradict (when both name actors, they share one: a session or room many agents use is a
   place, not a participant); and they share a participant (an actor, target or session, or
   a member of the pair or cycle a finding names), or at least `shared_share` of the smaller
   one's claimed events are also the other's (attribution counts the events one claims and
   the other owns: those the loop's finding explains better than its signal).
3. One primary each. Runs are taken in the order attribution prefers them: detector rank
   (the most specific first), then severity, then the earlier start. A run that describes
   the same loop as no incident's primary starts an incident and is its primary; any other
   joins, as a corroborating signal, the one incident whose primary it shares the most
   claimed events with (then the most participants, then the incident made first). A signal
   never joins two incidents: a whole-log rate spike over two loops does not merge them.
4. Severity. The highest of its members, raised one level (at most to critical) when `agree`
   or more different detectors found the loop.
5. Id. Derived from the primary finding's id, which is stable across scans (detector,
   participants, where it began): an incident keeps its id while its loop grows.
6. One place, one time, one incident. Incidents with members that share a session (an
   episode, a room, a conversation) in a file in common, over spans that overlap, are one
   incident whatever their actors: a repair loop and the runner's repeated error over the
   same steps of one episode are one story; so are two bursts of one actor inside the window
   where it behaved unlike the rest. The one whose primary comes first in attribution's order
   keeps its primary; the other's findings become its signals.
7. Words. An incident says what looped without numbers (`phrase`, from its primary
   finding's participants and details, never its title), then its own numbers: the events
   its members own (each counted once), over its own span (`title`). A detector's title
   quotes the piece it measured, which for a storm in pieces is not the storm.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from .detect.base import human_duration
from .vocabulary import Severity


@dataclass(frozen=True)
class Rules:
    """The numbers of the grouping rules (the module's docstring says what each decides)."""

    gap_s: float = dataclasses.field(default=300.0, metadata={
        "doc": "findings whose spans lie at most this many seconds apart are adjacent: pieces "
               "of one run, or signals of one loop"})
    shared_share: float = dataclasses.field(default=0.5, metadata={
        "doc": "two findings that name no common participant still describe one loop when "
               "this share of the smaller one's claimed events are also the other's"})
    agree: int = dataclasses.field(default=3, metadata={
        "doc": "this many different detectors finding one loop raise its severity one level"})

    def describe(self) -> dict:
        return dataclasses.asdict(self)


DEFAULT_RULES = Rules()


@dataclass(frozen=True)
class Item:
    """What grouping knows of one finding."""

    id: str
    detector: str
    rank: int  # the detector's rank: the lower explains an event better (attribution's order)
    severity: str
    start: dt.datetime | None
    end: dt.datetime | None
    key: tuple  # actors, targets, sessions (sorted): rule 1's "same participants"
    actors: frozenset[str] = frozenset()
    names: frozenset[str] = frozenset()  # every participant: actors, targets, sessions, pair, cycle
    sources: frozenset[str] = frozenset()  # the files its claimed events are in
    claimed: int = 0  # how many events it claims


def parse_time(text: str | None) -> dt.datetime | None:
    if not text:
        return None
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).replace(tzinfo=None)


def item(f: Mapping, rank: int, sources: Iterable[str] | None = None,
         claimed: int | None = None) -> Item:
    """The `Item` of a findings/v1 finding. Without `sources` (what attribution knows), the
    files its evidence lines are in; without `claimed`, its `lines`."""
    d = f.get("details") or {}
    actors = frozenset(str(a) for a in f.get("actors") or [])
    targets = frozenset(str(t) for t in f.get("targets") or [])
    sessions = frozenset(str(s) for s in f.get("sessions") or [])
    names = set(actors | targets | sessions)
    for key in ("pair", "cycle"):  # the participants a finding names besides its lists
        value = d.get(key)
        if isinstance(value, (list, tuple)):
            names.update(str(x) for x in value if x is not None)
    if sources is None:
        sources = {e["file"] for e in f.get("evidence") or [] if e.get("file")}
    return Item(
        id=f["id"], detector=f["detector"], rank=rank, severity=f["severity"],
        start=parse_time(f.get("start")), end=parse_time(f.get("end")),
        key=(tuple(sorted(actors)), tuple(sorted(targets)), tuple(sorted(sessions))),
        actors=actors, names=frozenset(names), sources=frozenset(sources),
        claimed=int(f.get("lines") or 0) if claimed is None else int(claimed))


def _sev(severity: str) -> int:
    return Severity(severity).rank


@dataclass
class Run:
    """Pieces of one detector's finding on the same participants (rule 1)."""

    items: list[Item]
    interruptions: int = 0
    interrupted_s: float = 0.0

    @property
    def head(self) -> Item:
        """Its most severe piece, the earliest of those: the finding that speaks for it."""
        return min(self.items, key=lambda i: (-_sev(i.severity), i.start or dt.datetime.max, i.id))

    @property
    def start(self) -> dt.datetime | None:
        return min((i.start for i in self.items if i.start), default=None)

    @property
    def end(self) -> dt.datetime | None:
        return max((i.end for i in self.items if i.end), default=None)

    @property
    def actors(self) -> frozenset[str]:
        return frozenset().union(*(i.actors for i in self.items))

    @property
    def names(self) -> frozenset[str]:
        return frozenset().union(*(i.names for i in self.items))

    @property
    def sources(self) -> frozenset[str]:
        return frozenset().union(*(i.sources for i in self.items))

    @property
    def claimed(self) -> int:
        return sum(i.claimed for i in self.items)

    def priority(self) -> tuple:
        """Attribution's order: the most specific detector, the most severe, the earliest."""
        h = self.head
        return (h.rank, -_sev(h.severity), self.start or dt.datetime.max, h.id)


@dataclass
class Incident:
    """One loop: its primary finding, the other pieces of that finding's run, the findings
    that corroborate it, and what they say together."""

    id: str
    primary: str  # the finding id that speaks for it
    pieces: list[str]  # its run: the primary and its other pieces, by start
    signals: list[str]  # corroborating findings, in attribution's order
    detectors: list[str]  # the different detectors, the primary's first
    severity: str
    highest: str  # the highest severity of its members (severity may be raised above it)
    start: dt.datetime | None
    end: dt.datetime | None
    interruptions: int = 0  # gaps between the pieces of the primary's run
    interrupted_s: float = 0.0
    sources: list[str] = field(default_factory=list)

    @property
    def members(self) -> list[str]:
        return [self.primary] + [p for p in self.pieces if p != self.primary] + self.signals

    @property
    def raised(self) -> bool:
        return self.severity != self.highest


def incident_id(primary: str) -> str:
    return hashlib.sha256(f"incident\x1f{primary}".encode()).hexdigest()[:16]


def _near(a0, a1, b0, b1, gap_s: float) -> bool:
    """Spans that overlap, or lie at most `gap_s` apart (a span without times is near none)."""
    if None in (a0, a1, b0, b1):
        return False
    return (max(a0, b0) - min(a1, b1)).total_seconds() <= gap_s


def runs(items: Iterable[Item], rules: Rules = DEFAULT_RULES) -> list[Run]:
    """Rule 1: the pieces of each run, merged; every item is in exactly one run."""
    buckets: dict[tuple, list[Item]] = {}
    for it in items:
        buckets.setdefault((it.detector, it.key), []).append(it)
    out: list[Run] = []
    for bucket in buckets.values():
        bucket.sort(key=lambda i: (i.start or dt.datetime.max, i.end or dt.datetime.max, i.id))
        open_: list[tuple[Run, dt.datetime | None, frozenset[str]]] = []
        for it in bucket:
            joined = False
            for k in range(len(open_) - 1, -1, -1):
                run, end, sources = open_[k]
                if (sources & it.sources or not sources or not it.sources) and \
                        _near(run.start, end, it.start, it.end, rules.gap_s):
                    if it.start and end and it.start > end:
                        run.interruptions += 1
                        run.interrupted_s += (it.start - end).total_seconds()
                    run.items.append(it)
                    open_[k] = (run, max(end, it.end), sources | it.sources)
                    joined = True
                    break
            if not joined:
                run = Run([it])
                out.append(run)
                open_.append((run, it.end, it.sources))
    return out


def _shared(a: Run, b: Run, shared: Mapping[str, Mapping[str, int]]) -> int:
    return sum(shared.get(x.id, {}).get(y.id, 0) for x in a.items for y in b.items)


def related(a: Run, b: Run, shared_events: int, rules: Rules = DEFAULT_RULES) -> bool:
    """Rule 2: whether two runs describe the same loop."""
    sa, sb = a.sources, b.sources
    if sa and sb and not sa & sb:
        return False
    if not _near(a.start, a.end, b.start, b.end, rules.gap_s):
        return False
    aa, ab = a.actors, b.actors
    if aa and ab and not aa & ab:
        return False
    if a.names & b.names:
        return True
    smaller = min(a.claimed, b.claimed)
    return shared_events > 0 and shared_events >= rules.shared_share * smaller


def group(items: Iterable[Item], shared: Mapping[tuple[str, str], int] | None = None,
          rules: Rules = DEFAULT_RULES) -> list[Incident]:
    """The incidents of `items`. `shared`: (finding id, finding id) → how many events the two
    have in common (either order, both orders add up; absent pairs share none). Incidents come
    most severe first, then by start."""
    both: dict[str, dict[str, int]] = {}
    for (x, y), n in (shared or {}).items():
        if n:
            both.setdefault(x, {})[y] = both.setdefault(x, {}).get(y, 0) + n
            both.setdefault(y, {})[x] = both.setdefault(y, {}).get(x, 0) + n
    drafts: list[tuple[Run, list[Run]]] = []  # (primary run, signal runs)
    by_name: dict[str, set[int]] = {}  # participant → incidents whose primary names it
    by_member: dict[str, int] = {}  # finding id of a primary run's piece → its incident
    for run in sorted(runs(items, rules), key=Run.priority):
        candidates: set[int] = set()
        for name in run.names:
            candidates |= by_name.get(name, set())
        for it in run.items:
            candidates |= {by_member[o] for o in both.get(it.id, {}) if o in by_member}
        best, best_key = None, None
        for k in candidates:
            primary = drafts[k][0]
            n = _shared(run, primary, both)
            if not related(primary, run, n, rules):
                continue
            key = (n, len(run.names & primary.names), -k)
            if best_key is None or key > best_key:
                best, best_key = k, key
        if best is not None:
            drafts[best][1].append(run)
            continue
        k = len(drafts)
        drafts.append((run, []))
        for name in run.names:
            by_name.setdefault(name, set()).add(k)
        for it in run.items:
            by_member[it.id] = k
    drafts = _same_place(drafts)
    return sorted((_incident(p, s, rules) for p, s in drafts),
                  key=lambda i: (-_sev(i.severity), i.start or dt.datetime.max, i.id))


def _sessions(run: Run) -> frozenset[str]:
    return frozenset().union(*(frozenset(i.key[2]) for i in run.items))


def _overlap(a0, a1, b0, b1) -> bool:
    """Spans that share a moment (a span without times shares none)."""
    return None not in (a0, a1, b0, b1) and max(a0, b0) <= min(a1, b1)


def _same_place(drafts: list[tuple[Run, list[Run]]]) -> list[tuple[Run, list[Run]]]:
    """Rule 6: drafts (in attribution's order) with runs that share a session in a file in
    common over overlapping spans, joined (transitively) into the first of them: no two
    incidents hold one session of one log at one time, whichever members hold it."""
    parent = list(range(len(drafts)))

    def root(k: int) -> int:
        while parent[k] != k:
            parent[k] = parent[parent[k]]
            k = parent[k]
        return k

    spots: dict[str, list[tuple[int, Run]]] = {}  # session → (draft, run) naming it
    for k, (primary, signals) in enumerate(drafts):
        for run in (primary, *signals):
            for session in _sessions(run):
                spots.setdefault(session, []).append((k, run))
    for spot in spots.values():
        for x, (k, a) in enumerate(spot):
            for m, b in spot[x + 1:]:
                if root(k) == root(m) or not _overlap(a.start, a.end, b.start, b.end):
                    continue
                if a.sources and b.sources and not a.sources & b.sources:
                    continue
                lo, hi = sorted((root(k), root(m)))
                parent[hi] = lo
    joined: dict[int, tuple[Run, list[Run]]] = {}
    for k, (primary, signals) in enumerate(drafts):
        r = root(k)
        if r == k:
            joined[k] = (primary, list(signals))
        else:
            joined[r][1].extend([primary, *signals])
    return [(p, sorted(s, key=Run.priority)) for p, s in joined.values()]


def _incident(primary: Run, signals: list[Run], rules: Rules) -> Incident:
    every = [primary, *signals]
    detectors = list(dict.fromkeys(r.head.detector for r in every))
    highest = max((it.severity for r in every for it in r.items), key=_sev)
    severity = highest
    if len(detectors) >= rules.agree and _sev(highest) < _sev(Severity.CRITICAL):
        severity = list(Severity)[_sev(highest) + 1].value
    head = primary.head
    starts = [r.start for r in every if r.start]
    ends = [r.end for r in every if r.end]
    pieces = sorted(primary.items, key=lambda i: (i.start or dt.datetime.max, i.id))
    return Incident(
        id=incident_id(head.id), primary=head.id, pieces=[i.id for i in pieces],
        signals=[i.id for r in signals
                 for i in sorted(r.items, key=lambda i: (i.start or dt.datetime.max, i.id))],
        detectors=detectors, severity=severity, highest=highest,
        start=min(starts, default=None), end=max(ends, default=None),
        interruptions=primary.interruptions, interrupted_s=primary.interrupted_s,
        sources=sorted(frozenset().union(*(r.sources for r in every))))


# -- words: what looped, without numbers; then the incident's own numbers ---------------------


def short(text: object, limit: int = 48) -> str:
    s = "" if text is None else str(text)
    return s if len(s) <= limit else s[: limit - 1] + "…"


def _who(actors: list[str]) -> list[tuple[str, str]]:
    if not actors:
        return [("t", "one caller")]
    if len(actors) == 1:
        return [("t", "one agent ("), ("code", short(actors[0])), ("t", ")")]
    if len(actors) == 2:
        return [("t", "two agents ("), ("code", short(actors[0])), ("t", " and "),
                ("code", short(actors[1])), ("t", ")")]
    return [("t", f"{len(actors)} agents")]


def _in_session(f: Mapping) -> list[tuple[str, str]]:
    sessions = f.get("sessions") or []
    if len(sessions) != 1:
        return []
    return [("t", " in "), ("code", short(sessions[0]))]


def phrase(f: Mapping, noun: str = "events") -> list[tuple[str, str]]:
    """Who did what, for a manager, without numbers: `one agent (x) retrying `scroll` on
    closed session y`, as (style, text) segments (style "t" text, "code" a name from the
    logs). Read from the finding's participants and details, so it stays true however the
    loop grows; a detector it does not know is named with its participants."""
    d = f.get("details") or {}
    det = f["detector"]
    actors = list(f.get("actors") or [])
    if det == "repeated_error":
        seg = _who(actors) + [("t", " retrying "), ("code", short(d.get("action") or "a call"))]
        if f.get("sessions"):
            closed = "closed " if d.get("terminal_signal") else ""
            seg += [("t", f" on {closed}session "), ("code", short(f["sessions"][0]))]
        if d.get("error"):
            seg += [("t", " despite "), ("code", short(d["error"]))]
        return seg
    if det == "ping_pong":
        names = d.get("names") or {}
        pair = d.get("pair") or actors[:2]
        shown = [names.get(p, p) for p in pair]
        room = str(d.get("channel") or "")
        where = [("t", " in "), ("code", short(room))] if room.startswith("room") else []
        return _who(shown) + [("t", " answering each other")] + where
    if det == "trigger_cycle":
        cycle = d.get("cycle") or actors
        if cycle:
            ring = list(cycle) + [cycle[0]]
            return [("t", "agents triggering each other in a cycle ("),
                    ("code", short(" → ".join(map(str, ring)), 90)), ("t", ")")]
        return [("t", "agents triggering each other in a cycle")]
    if det == "rate_spike":
        scope, series = d.get("scope"), d.get("series")
        if scope in ("session", "actor") and series:
            return [("t", f"a burst of {noun} from {scope} "), ("code", short(series))]
        return [("t", f"a burst of {noun} across the whole {d.get('format') or ''} log".replace(
            "  ", " "))]
    if det == "repair_loop":
        return _who(actors) + [("t", " re-submitting a proposal the validator kept rejecting")]
    if det == "repeated_action":
        same = " with the same arguments" if d.get("args") is not None else ""
        return (_who(actors) + [("t", " calling "), ("code", short(d.get("action") or "a call")),
                                ("t", f" again and again{same}")] + _in_session(f))
    if det == "alternating_action":
        steps = [str(s.get("action")) for s in d.get("cycle") or [] if isinstance(s, Mapping)]
        ring = " → ".join([*steps, steps[0]]) if steps else "the same calls"
        return (_who(actors) + [("t", " going round "), ("code", short(ring, 90))]
                + _in_session(f))
    if det == "repeated_message":
        return _who(actors) + [("t", " repeating the same message")] + _in_session(f)
    if det == "unusual_actor":
        unusual = ", ".join(str(u).replace("_", " ") for u in (d.get("unusual_features") or [])[:2])
        return _who(actors) + [("t", " behaving unlike the rest of the log"
                                     + (f" ({unusual})" if unusual else ""))]
    return _who(actors) + [("t", ": " + det.replace("_", " "))] + _in_session(f)


def segments(text: str) -> list[tuple[str, str]]:
    """A text with `code` spans as segments, its code spans kept apart."""
    parts = text.split("`")
    if len(parts) % 2 == 0:
        return [("t", text)]
    return [("code" if i % 2 else "t", p) for i, p in enumerate(parts) if p]


def plain(segs: list[tuple[str, str]]) -> str:
    """Segments as one line of text, names from the logs between backticks."""
    return "".join(f"`{t}`" if style == "code" else t for style, t in segs)


def title(head: Mapping, events: int, duration_s: float | None) -> str:
    """An incident's title: what looped (its primary finding's `phrase`), then the incident's
    own event count and span, which every reader compares with its figures."""
    text = plain(phrase(head))
    span = f" over {human_duration(duration_s)}" if duration_s is not None else ""
    return f"{text[:1].upper()}{text[1:]}: {events:,} event{'s' if events != 1 else ''}{span}"


__all__ = ["DEFAULT_RULES", "Incident", "Item", "Rules", "Run", "group", "incident_id", "item",
           "phrase", "plain", "related", "runs", "segments", "title"]
