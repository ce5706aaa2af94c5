"""The exceptions the SDK raises. A JSON-RPC error from the gateway becomes an `AxpError`
subclass chosen by its code (`CapabilityDenied` for -32002, `UnknownTool` for -32004, ...), each
carrying the error's `data`, and in particular `data.reason`, the gateway's explanation. Failures
of the transport itself (nothing listens, a body that is not JSON-RPC, a stream that keeps
breaking) are `TransportError`, never an `AxpError`, so callers can tell "the gateway said no"
from "the gateway could not be heard".
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Type


class AxpSdkError(Exception):
    """The base of everything this SDK raises on purpose."""


class TransportError(AxpSdkError):
    """The request could not be sent or its answer could not be read as JSON-RPC."""

    def __init__(self, message: str, *, status: Optional[int] = None, body: Optional[str] = None):
        super().__init__(message)
        self.status = status
        self.body = body


class ConnectionLost(TransportError):
    """A job's event stream broke more times in a row than the client is willing to retry."""


class AxpError(AxpSdkError):
    """The gateway answered with a JSON-RPC error.

    `code` is the JSON-RPC code, `name` the gateway's name for it (`data.name`), `reason` its
    explanation (`data.reason`) and `data` the whole `data` object (e.g. `missing` for a denied
    grant, `limit` for a quota). Match on the class or on `code`, never on the message text.
    """

    #: The JSON-RPC code this class stands for (None on the base class).
    CODE: Optional[int] = None

    def __init__(self, code: int, message: str, data: Optional[Dict[str, Any]] = None,
                 *, http_status: Optional[int] = None):
        super().__init__(message)
        self.code = code
        self.message = message
        self.data: Dict[str, Any] = data if isinstance(data, dict) else {}
        self.name: Optional[str] = self.data.get("name")
        self.reason: Optional[str] = self.data.get("reason")
        self.http_status = http_status

    def __repr__(self) -> str:
        return f"{type(self).__name__}(code={self.code}, reason={self.reason!r})"


class ParseError(AxpError):
    CODE = -32700


class InvalidRequest(AxpError):
    CODE = -32600


class MethodNotFound(AxpError):
    CODE = -32601


class InvalidParams(AxpError):
    CODE = -32602


class InternalError(AxpError):
    CODE = -32603


class Unauthorized(AxpError):
    """A missing, forged, expired or revoked credential."""

    CODE = -32001


class CapabilityDenied(AxpError):
    """The token does not grant what was asked; `data["missing"]` names the grant."""

    CODE = -32002


class TierUnavailable(AxpError):
    CODE = -32003


class UnknownTool(AxpError):
    CODE = -32004


class UnknownJob(AxpError):
    CODE = -32005


class UnknownSession(AxpError):
    CODE = -32006


class LimitExceeded(AxpError):
    """A quota or size limit; `data["limit"]` names it."""

    CODE = -32007


class ProviderUnavailable(AxpError):
    CODE = -32008


class ApprovalRequired(AxpError):
    """A call that needs an operator's approval was denied or cancelled."""

    CODE = -32009


_BY_CODE: Dict[int, Type[AxpError]] = {
    cls.CODE: cls
    for cls in (
        ParseError, InvalidRequest, MethodNotFound, InvalidParams, InternalError, Unauthorized,
        CapabilityDenied, TierUnavailable, UnknownTool, UnknownJob, UnknownSession, LimitExceeded,
        ProviderUnavailable, ApprovalRequired,
    )
    if cls.CODE is not None
}


def error_from_rpc(error: Any, *, http_status: Optional[int] = None) -> AxpError:
    """The typed exception for a JSON-RPC `error` object (an unknown code gives `AxpError`)."""
    if not isinstance(error, dict) or not isinstance(error.get("code"), int):
        return AxpError(-32603, f"malformed JSON-RPC error: {error!r}", None, http_status=http_status)
    code = error["code"]
    cls = _BY_CODE.get(code, AxpError)
    return cls(code, str(error.get("message", "")), error.get("data"), http_status=http_status)
