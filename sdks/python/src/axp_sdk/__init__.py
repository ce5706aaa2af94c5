"""axp_sdk: typed clients of an AXP gateway's `/axp` endpoint. `Client` blocks, `AsyncClient`
is for asyncio; both open sessions, search and describe tools, start jobs and stream their
events (resuming after a dropped connection without losing or repeating one), attenuate tokens,
and raise a JSON-RPC error as the `AxpError` subclass of its code with `data.reason` on it.
"""

from .aio import AsyncClient, AsyncEventStream, AsyncJob
from .client import Client, EventStream, Job
from .errors import (
    ApprovalRequired,
    AxpError,
    AxpSdkError,
    CapabilityDenied,
    ConnectionLost,
    InternalError,
    InvalidParams,
    InvalidRequest,
    LimitExceeded,
    MethodNotFound,
    ParseError,
    ProviderUnavailable,
    TierUnavailable,
    TransportError,
    Unauthorized,
    UnknownJob,
    UnknownSession,
    UnknownTool,
)
from .types import Attenuated, Index, JobEvent, JobStatus, Session, ToolDescription, ToolSummary

__all__ = [
    "ApprovalRequired", "AsyncClient", "AsyncEventStream", "AsyncJob", "Attenuated", "AxpError",
    "AxpSdkError", "CapabilityDenied", "Client", "ConnectionLost", "EventStream", "Index",
    "InternalError", "InvalidParams", "InvalidRequest", "Job", "JobEvent", "JobStatus",
    "LimitExceeded", "MethodNotFound", "ParseError", "ProviderUnavailable", "Session",
    "TierUnavailable", "ToolDescription", "ToolSummary", "TransportError", "Unauthorized",
    "UnknownJob", "UnknownSession", "UnknownTool",
]
