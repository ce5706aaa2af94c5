"""The blocking client, `Client`, and its job handle, `Job`: one method per AXP call, each
returning a typed result or raising a typed error, and job events as an iterator that
reconnects by itself when the HTTP stream breaks. The async twin is `axp_sdk.aio`; both share
`_core`, so they cannot disagree about the wire.
"""

from __future__ import annotations

import time
from typing import Any, Dict, Iterator, List, Optional, Union

import httpx

from . import _core
from .errors import TransportError
from .types import Attenuated, Index, JobEvent, JobStatus, Session, ToolDescription

DEFAULT_TIMEOUT = httpx.Timeout(30.0, read=60.0)


class Client:
    """A client of one gateway endpoint, e.g. `http://127.0.0.1:7878/axp`.

    `cap_token` (sent as `Axp-Capability`) is set by `open_session`, or given up front to act
    with a token from elsewhere (e.g. one a parent agent attenuated). `bearer` is an operator's
    token, needed where the gateway has `[[operators]]` configured.
    """

    def __init__(self, url: str, *, cap_token: Optional[str] = None, bearer: Optional[str] = None,
                 timeout: Union[float, httpx.Timeout] = DEFAULT_TIMEOUT,
                 http: Optional[httpx.Client] = None, max_retries: int = 5):
        self.url = url
        self.cap_token = cap_token
        self.bearer = bearer
        self.session: Optional[Session] = None
        self.max_retries = max_retries
        self._ids = _core.RpcIds()
        self._own_http = http is None
        # trust_env=False: a gateway is reached directly, never through a proxy from the
        # environment, which would also see the capability token.
        self._http = http or httpx.Client(timeout=timeout, trust_env=False)

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        """Closes the HTTP connections (not the session: see `close_session`)."""
        if self._own_http:
            self._http.close()

    # -- the JSON-RPC call -------------------------------------------------------------------

    def call(self, method: str, params: Optional[Dict[str, Any]] = None) -> Any:
        """Any AXP method by name; returns its `result` or raises the typed error."""
        body = _core.request_body(self._ids.next(), method, params)
        try:
            resp = self._http.post(self.url, content=body,
                                   headers=_core.headers(self.cap_token, self.bearer, _core.JSON_ONLY))
        except httpx.HTTPError as e:
            raise TransportError(f"cannot reach {self.url} for `{method}`: {e!r}") from e
        return _core.result_of(_core.parse_json(resp.content, resp.status_code, method),
                               resp.status_code, method)

    # -- sessions and tokens -----------------------------------------------------------------

    def open_session(self, *, workspace: Optional[str] = None, sandbox_tier: Optional[str] = None,
                     capabilities: Optional[List[str]] = None, ttl_s: Optional[int] = None) -> Session:
        """`session.open`; the client keeps the token for its later calls."""
        session = Session.from_json(self.call("session.open",
                                              _core.open_params(workspace, sandbox_tier, capabilities, ttl_s)))
        self.session, self.cap_token = session, session.cap_token
        return session

    def close_session(self) -> None:
        """`session.close`: revokes the session's tokens (and every token attenuated from them)."""
        self.call("session.close", {})
        self.session, self.cap_token = None, None

    def attenuate(self, capabilities: List[str], *, ttl_s: Optional[int] = None,
                  cap_token: Optional[str] = None) -> Attenuated:
        """`cap.attenuate`: a strictly narrower token, e.g. for a sub-agent, from this client's
        token (or `cap_token`). Asking for more than the token holds raises `CapabilityDenied`."""
        params: Dict[str, Any] = {"cap_token": cap_token or self.cap_token, "capabilities": capabilities}
        if ttl_s is not None:
            params["ttl_s"] = ttl_s
        return Attenuated.from_json(self.call("cap.attenuate", params))

    def with_token(self, cap_token: str) -> "Client":
        """Another client of the same gateway acting with `cap_token` (connections shared)."""
        return Client(self.url, cap_token=cap_token, bearer=self.bearer, http=self._http,
                      max_retries=self.max_retries)

    # -- tools -------------------------------------------------------------------------------

    def index(self, query: Optional[str] = None, *, provider: Optional[str] = None,
              limit: Optional[int] = None, offset: Optional[int] = None) -> Index:
        """`axp.index`: the tools this token may call, ranked by `query` when given."""
        return Index.from_json(self.call("axp.index", _core.index_params(query, provider, limit, offset)))

    def describe(self, name: str) -> ToolDescription:
        """`axp.describe`: one tool's signature and schema."""
        return ToolDescription.from_json(self.call("axp.describe", {"name": name}))

    # -- jobs --------------------------------------------------------------------------------

    def start(self, *, tool: Optional[str] = None, arguments: Optional[Dict[str, Any]] = None,
              command: Union[None, str, List[str]] = None, code: Optional[Dict[str, Any]] = None,
              cwd: Optional[str] = None, env: Optional[Dict[str, str]] = None,
              timeout_s: Optional[int] = None, idempotency_key: Optional[str] = None,
              pty: Optional[Dict[str, int]] = None) -> "Job":
        """`job.start` with one of `tool`+`arguments`, `command` (argv or a string) or `code`
        (`{"language", "source"}`); returns the job, whose `events()` streams its log."""
        params = _core.start_params(tool, arguments, command, code,
                                    {"cwd": cwd, "env": env, "timeout_s": timeout_s,
                                     "idempotency_key": idempotency_key, "pty": pty})
        r = self.call("job.start", params)
        return Job(self, r["job_id"], r.get("state"))

    def job(self, job_id: str) -> "Job":
        """A handle on a job started earlier (by this or another client of the session)."""
        return Job(self, job_id, None)

    def attach(self, job_id: str, from_seq: int = 0) -> "EventStream":
        """The job's events from `from_seq` on, streamed; see `EventStream`."""
        return EventStream(self, job_id, from_seq)

    def jobs(self) -> List[JobStatus]:
        return [JobStatus.from_json(j) for j in self.call("job.list", {}).get("jobs", [])]


class EventStream:
    """A job's events, in seq order, until its `exit` event.

    Iterating sends `job.attach` asking for an event stream (SSE). When the connection breaks
    before the job's log is finished (a proxy cut it, the gateway restarted, a network blip),
    the stream reconnects with `from_seq` set to the first seq it has not delivered, so the
    caller sees every event exactly once. `reconnects` counts the reconnections; after
    `max_retries` consecutive tries that deliver nothing it raises `ConnectionLost`, whose
    message says the seq to resume from. Typed errors (an unknown job, a revoked token) are
    raised at once and not retried.
    """

    def __init__(self, client: Client, job_id: str, from_seq: int = 0):
        self._client = client
        self._state = _core.AttachState(job_id, from_seq, client.max_retries)

    @property
    def next_seq(self) -> int:
        return self._state.next_seq

    @property
    def reconnects(self) -> int:
        return self._state.reconnects

    @property
    def done(self) -> bool:
        return self._state.done

    def __iter__(self) -> Iterator[JobEvent]:
        st = self._state
        while not st.done:
            try:
                yield from self._one_connection()
            except (httpx.HTTPError, _core.Dropped) as e:
                time.sleep(st.failed(e))

    def _one_connection(self) -> Iterator[JobEvent]:
        st, c = self._state, self._client
        body = _core.request_body(c._ids.next(), "job.attach", st.params())
        hdrs = _core.headers(c.cap_token, c.bearer, _core.JSON_OR_SSE)
        with c._http.stream("POST", c.url, content=body, headers=hdrs) as resp:
            status = resp.status_code
            if not _core.is_event_stream(resp.headers.get("content-type")):
                # The gateway answers in JSON when it refuses before streaming (an unknown job,
                # a bad token): that error is the answer, not a broken stream.
                result = _core.result_of(_core.parse_json(resp.read(), status, "job.attach"), status, "job.attach")
                for raw in result.get("events", []):
                    ev = st.accept(raw)
                    if ev is not None:
                        yield ev
                st.finish(result)
                return
            parser = _core.SseParser()
            for chunk in resp.iter_bytes():
                for msg in _core.stream_messages(parser, chunk, "job.attach", status):
                    ev = _core.attach_message(st, msg, status)
                    if ev is not None:
                        yield ev
                    if st.done:
                        return
        raise _core.Dropped()


class Job:
    """A job on the gateway: `events()` streams its log, `wait()` follows it to its end."""

    def __init__(self, client: Client, job_id: str, state: Optional[str]):
        self.client = client
        self.id = job_id
        #: The state `job.start` answered (`running` or `awaiting_approval`).
        self.state = state

    def __repr__(self) -> str:
        return f"Job({self.id!r})"

    def events(self, from_seq: int = 0) -> EventStream:
        return EventStream(self.client, self.id, from_seq)

    def wait(self) -> JobEvent:
        """Follows the log to its end and returns the `exit` event."""
        last: Optional[JobEvent] = None
        for ev in self.events():
            if ev.kind == "exit":
                last = ev
        if last is None:
            raise TransportError(f"the log of {self.id} ended without an exit event")
        return last

    def status(self) -> JobStatus:
        return JobStatus.from_json(self.client.call("job.status", {"job_id": self.id}))

    def cancel(self) -> bool:
        return bool(self.client.call("job.cancel", {"job_id": self.id}).get("cancelled"))

    def write(self, data: str, *, eof: bool = False) -> None:
        self.client.call("job.write", {"job_id": self.id, "data": data, "eof": eof})

    def signal(self, signal: str) -> None:
        self.client.call("job.signal", {"job_id": self.id, "signal": signal})
