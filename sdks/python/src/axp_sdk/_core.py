"""What the sync and async clients share, so that neither decides anything alone: the JSON-RPC
envelope and headers of a request, reading an answer (a JSON body or a server-sent-events
stream) into a result or a typed error, and the bookkeeping of a resumable job stream (the
next seq to ask for, skipping what was already delivered, counting reconnects).
"""

from __future__ import annotations

import itertools
import json
from typing import Any, Dict, Iterator, List, Optional

from .errors import ConnectionLost, TransportError, error_from_rpc
from .types import JobEvent

#: The header that carries a session's capability token.
CAPABILITY_HEADER = "Axp-Capability"
JSON_ONLY = "application/json"
JSON_OR_SSE = "application/json, text/event-stream"


class RpcIds:
    """Request ids 1, 2, ... for one client (thread-safe enough: `itertools.count` is atomic
    under the GIL)."""

    def __init__(self) -> None:
        self._next = itertools.count(1)

    def next(self) -> int:
        return next(self._next)


def request_body(rpc_id: int, method: str, params: Optional[Dict[str, Any]]) -> bytes:
    msg: Dict[str, Any] = {"jsonrpc": "2.0", "id": rpc_id, "method": method}
    if params is not None:
        msg["params"] = params
    return json.dumps(msg, separators=(",", ":")).encode()


def headers(cap_token: Optional[str], bearer: Optional[str], accept: str) -> Dict[str, str]:
    h = {"Content-Type": "application/json", "Accept": accept}
    if cap_token:
        h[CAPABILITY_HEADER] = cap_token
    if bearer:
        h["Authorization"] = f"Bearer {bearer}"
    return h


def is_event_stream(content_type: Optional[str]) -> bool:
    return bool(content_type) and content_type.split(";")[0].strip() == "text/event-stream"


def parse_json(body: bytes, status: int, method: str) -> Any:
    try:
        return json.loads(body)
    except ValueError:
        text = body.decode("utf-8", "replace")
        raise TransportError(f"`{method}` answered HTTP {status} with a body that is not JSON: {text[:200]}",
                             status=status, body=text) from None


def result_of(message: Any, status: int, method: str) -> Any:
    """The `result` of a JSON-RPC response, or its error raised as the typed exception.

    The gateway sends JSON-RPC errors with non-2xx statuses too (401 for a bad credential, 404
    for a session that is gone); those are read like any other error.
    """
    if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
        raise TransportError(f"`{method}` answered HTTP {status} with something else than a JSON-RPC response",
                             status=status, body=json.dumps(message))
    if "error" in message:
        raise error_from_rpc(message["error"], http_status=status)
    if "result" not in message:
        raise TransportError(f"`{method}` answered HTTP {status} with neither a result nor an error",
                             status=status, body=json.dumps(message))
    return message["result"]


class SseParser:
    """The server-sent-events framing: `data:` lines gathered into one message per blank
    line. Ids, event names, retry hints and `:` comments (the gateway's keep-alives) are
    skipped: resuming is done from the seq inside each event, which is what `job.attach` takes.
    """

    def __init__(self) -> None:
        self._partial = b""
        self._data: List[str] = []

    def feed(self, chunk: bytes) -> Iterator[str]:
        """Adds bytes as they arrive (a chunk may end anywhere, even inside a character) and
        yields the data of each message they complete."""
        self._partial += chunk
        while True:
            end = self._partial.find(b"\n")
            if end < 0:
                return
            line = self._partial[:end].decode("utf-8", "replace").rstrip("\r")
            self._partial = self._partial[end + 1:]
            if not line:
                if self._data:
                    data, self._data = "\n".join(self._data), []
                    yield data
                continue
            field, _, value = line.partition(":")
            if field == "data":
                self._data.append(value[1:] if value.startswith(" ") else value)


class Dropped(Exception):
    """The event stream ended before the response that closes it."""


class AttachState:
    """Where a resumable `job.attach` stands: `next_seq` is the first seq not yet delivered.

    Every (re)connection asks for `from_seq = next_seq`, and any event below it is dropped, so
    a stream that breaks anywhere, even in the middle of a message, is resumed without losing
    or repeating an event.
    """

    def __init__(self, job_id: str, from_seq: int, max_retries: int):
        self.job_id = job_id
        self.next_seq = from_seq
        self.done = False
        self.reconnects = 0
        self._failures = 0
        self._max_retries = max_retries

    def params(self, wait_ms: Optional[int] = None) -> Dict[str, Any]:
        p: Dict[str, Any] = {"job_id": self.job_id, "from_seq": self.next_seq}
        if wait_ms is not None:
            p["wait_ms"] = wait_ms
        return p

    def accept(self, raw: Any) -> Optional[JobEvent]:
        """The event to deliver, or None for one already delivered (or not of this job)."""
        if not isinstance(raw, dict) or raw.get("job_id") != self.job_id:
            return None
        event = JobEvent.from_json(raw)
        if event.seq < self.next_seq:
            return None
        self.next_seq = event.seq + 1
        self._failures = 0
        return event

    def finish(self, result: Any) -> None:
        """The closing response of a stream (or a JSON answer) says where the log ends."""
        if isinstance(result, dict):
            if isinstance(result.get("next_seq"), int):
                self.next_seq = max(self.next_seq, result["next_seq"])
            self.done = bool(result.get("done"))

    def failed(self, exc: BaseException) -> float:
        """Counts a broken connection; returns how long to wait before the next try, or raises
        `ConnectionLost` once `max_retries` tries in a row delivered nothing."""
        self._failures += 1
        if self._failures > self._max_retries:
            raise ConnectionLost(
                f"the event stream of {self.job_id} broke {self._failures} times in a row "
                f"(last: {exc!r}); resume with from_seq={self.next_seq}") from exc
        self.reconnects += 1
        return min(0.05 * (2 ** (self._failures - 1)), 2.0)


def stream_messages(parser: SseParser, chunk: bytes, method: str, status: int) -> Iterator[Dict[str, Any]]:
    for data in parser.feed(chunk):
        try:
            msg = json.loads(data)
        except ValueError:
            raise TransportError(f"`{method}` streamed an event that is not JSON: {data[:200]}",
                                 status=status, body=data) from None
        if isinstance(msg, dict):
            yield msg


def attach_message(state: AttachState, msg: Dict[str, Any], status: int) -> Optional[JobEvent]:
    """Reads one message of a streamed `job.attach`: a `job.event` notification gives its event
    (unless already delivered); the response finishes the stream or raises its error."""
    if msg.get("method") == "job.event":
        return state.accept(msg.get("params"))
    if "id" in msg and ("result" in msg or "error" in msg):
        state.finish(result_of(msg, status, "job.attach"))
        if not state.done:
            # A response that is not the end (the gateway stopped replaying): ask again.
            raise Dropped()
    return None


def start_params(tool: Optional[str], arguments: Optional[Dict[str, Any]], command: Any,
                 code: Optional[Dict[str, Any]], extra: Dict[str, Any]) -> Dict[str, Any]:
    """`job.start`'s params: exactly one of a tool call, a command or a code program."""
    chosen = [k for k, v in (("tool", tool), ("command", command), ("code", code)) if v is not None]
    if len(chosen) != 1:
        raise ValueError("job.start takes exactly one of tool=, command= or code=")
    p: Dict[str, Any] = {}
    if tool is not None:
        p["tool"] = tool
        p["arguments"] = arguments or {}
    elif command is not None:
        p["command"] = command
    else:
        p["code"] = code
    p.update({k: v for k, v in extra.items() if v is not None})
    return p


def open_params(workspace: Optional[str], sandbox_tier: Optional[str],
                capabilities: Optional[List[str]], ttl_s: Optional[int]) -> Dict[str, Any]:
    p: Dict[str, Any] = {}
    for k, v in (("workspace", workspace), ("sandbox_tier", sandbox_tier),
                 ("capabilities", capabilities), ("ttl_s", ttl_s)):
        if v is not None:
            p[k] = v
    return p


def index_params(query: Optional[str], provider: Optional[str], limit: Optional[int],
                 offset: Optional[int]) -> Dict[str, Any]:
    return {k: v for k, v in (("query", query), ("provider", provider), ("limit", limit),
                              ("offset", offset)) if v is not None}
