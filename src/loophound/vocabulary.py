"""The words loophound's data is made of, in one place: severities, finding statuses, event
kinds.

Each is a `str` enum, so a value compares equal to the text stored in Parquet and JSON
(`Severity.HIGH == "high"`) and the contracts stay plain strings.
"""

from __future__ import annotations

from enum import StrEnum


class Severity(StrEnum):
    """How bad a finding is, in rising order (`rank` compares them)."""

    LOW = "low"
    MEDIUM = "medium"
    HIGH = "high"
    CRITICAL = "critical"

    @property
    def rank(self) -> int:
        return list(Severity).index(self)

    @classmethod
    def parse(cls, text: str, what: str = "severity") -> Severity:
        from .errors import ConfigError

        try:
            return cls(text)
        except ValueError:
            raise ConfigError(f"{what} must be one of {', '.join(SEVERITIES)}; got {text!r}"
                              ) from None


SEVERITIES: tuple[str, ...] = tuple(s.value for s in Severity)


class FindingStatus(StrEnum):
    """A finding's state against the scan before (scheduled scans follow findings by id)."""

    NEW = "new"
    GROWING = "growing"
    ESCALATED = "escalated"
    ONGOING = "ongoing"
    ENDED = "ended"


class EventKind(StrEnum):
    """What a line of a log is: the `kind` column of the events (schema.py describes each)."""

    REQUEST = "request"
    RESPONSE = "response"
    LIFECYCLE = "lifecycle"
    CONNECTION = "connection"
    CONFIG = "config"
    MESSAGE = "message"
    ROOM_POST = "room_post"
    TRIGGER = "trigger"
    SESSION_START = "session_start"
    SESSION_END = "session_end"
    STEP = "step"
    LLM_CALL = "llm_call"
    REPAIR_ATTEMPT = "repair_attempt"
    AUDIT = "audit"
    EPISODE_METRICS = "episode_metrics"
    RECORD = "record"
    TOOL_CALL = "tool_call"  # an agent's tool or function call, its result on the same event


class Verdict(StrEnum):
    """What a scan may say of its logs (coverage.py decides): never more than it could judge."""

    FINDINGS = "findings"  # at least one finding
    CLEAN = "clean"  # no finding, and every log read could be judged
    INCONCLUSIVE = "inconclusive"  # no finding, but some log could not be judged, or was skipped
