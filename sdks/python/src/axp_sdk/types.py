"""Typed views of the gateway's results: what `session.open`, `cap.attenuate`, `axp.index`,
`axp.describe`, `job.status` and the job events answer, as dataclasses. Each keeps the whole
JSON object it was read from in `raw`, so fields the gateway adds later are still reachable
without a new SDK release.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional


@dataclass(frozen=True)
class Session:
    """The answer to `session.open`; the client keeps `cap_token` for its later calls."""

    session_id: str
    cap_token: str
    capabilities: List[str]
    granted_tier: Optional[str]
    workspace: Optional[str]
    expires_at_ms: Optional[int]
    raw: Dict[str, Any] = field(repr=False)

    @classmethod
    def from_json(cls, r: Dict[str, Any]) -> "Session":
        return cls(
            session_id=r["session_id"],
            cap_token=r["cap_token"],
            capabilities=list(r.get("capabilities", [])),
            granted_tier=r.get("granted_tier"),
            workspace=r.get("workspace"),
            expires_at_ms=r.get("expires_at_ms"),
            raw=r,
        )


@dataclass(frozen=True)
class Attenuated:
    """The answer to `cap.attenuate`: a strictly narrower token and what it grants."""

    cap_token: str
    capabilities: List[str]
    raw: Dict[str, Any] = field(repr=False)

    @classmethod
    def from_json(cls, r: Dict[str, Any]) -> "Attenuated":
        return cls(cap_token=r["cap_token"], capabilities=list(r.get("capabilities", [])), raw=r)


@dataclass(frozen=True)
class ToolSummary:
    """One line of `axp.index`."""

    name: str
    desc: str
    signature: Optional[str]
    unavailable: Optional[Any]
    raw: Dict[str, Any] = field(repr=False)

    @classmethod
    def from_json(cls, r: Dict[str, Any]) -> "ToolSummary":
        return cls(name=r["name"], desc=r.get("desc", ""), signature=r.get("signature"),
                   unavailable=r.get("unavailable"), raw=r)


@dataclass(frozen=True)
class Index:
    """The answer to `axp.index`: a page of tools and how many match in all."""

    tools: List[ToolSummary]
    total: int
    raw: Dict[str, Any] = field(repr=False)

    @classmethod
    def from_json(cls, r: Dict[str, Any]) -> "Index":
        return cls(tools=[ToolSummary.from_json(t) for t in r.get("tools", [])],
                   total=int(r.get("total", 0)), raw=r)


@dataclass(frozen=True)
class ToolDescription:
    """The answer to `axp.describe`: a tool's TypeScript signature and JSON Schema."""

    name: str
    desc: str
    description: str
    signature: str
    schema: Dict[str, Any]
    output_schema: Optional[Dict[str, Any]]
    provider: str
    requires: List[str]
    available: bool
    annotations: Optional[Dict[str, Any]]
    lint: List[Any]
    raw: Dict[str, Any] = field(repr=False)

    @classmethod
    def from_json(cls, r: Dict[str, Any]) -> "ToolDescription":
        return cls(
            name=r["name"],
            desc=r.get("desc", ""),
            description=r.get("description", ""),
            signature=r.get("signature", ""),
            schema=r.get("schema") or {},
            output_schema=r.get("output_schema"),
            provider=r.get("provider", ""),
            requires=list(r.get("requires", [])),
            available=bool(r.get("available", True)),
            annotations=r.get("annotations"),
            lint=list(r.get("lint", [])),
            raw=r,
        )


@dataclass(frozen=True)
class JobEvent:
    """One event of a job's durable log.

    `kind` is `stdout`, `stderr` or `pty` (text in `data`), `progress`, `log`, `result`
    (`output`), `tool_call`, or `exit` (`state`, `code`, `signal`, `error`). `seq` numbers the
    events of one job from 0 without gaps.
    """

    job_id: str
    seq: int
    ts_ms: int
    kind: str
    data: Optional[Any] = None
    output: Optional[Any] = None
    state: Optional[str] = None
    code: Optional[int] = None
    signal: Optional[Any] = None
    error: Optional[Any] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_json(cls, r: Dict[str, Any]) -> "JobEvent":
        return cls(job_id=r["job_id"], seq=int(r["seq"]), ts_ms=int(r.get("ts_ms", 0)),
                   kind=r["kind"], data=r.get("data"), output=r.get("output"),
                   state=r.get("state"), code=r.get("code"), signal=r.get("signal"),
                   error=r.get("error"), raw=r)


@dataclass(frozen=True)
class JobStatus:
    """The answer to `job.status`."""

    job_id: str
    state: str
    next_seq: int
    code: Optional[int]
    signal: Optional[Any]
    raw: Dict[str, Any] = field(repr=False)

    @classmethod
    def from_json(cls, r: Dict[str, Any]) -> "JobStatus":
        return cls(job_id=r["job_id"], state=r["state"], next_seq=int(r.get("next_seq", 0)),
                   code=r.get("code"), signal=r.get("signal"), raw=r)

    @property
    def finished(self) -> bool:
        return self.state not in ("running", "awaiting_approval")
