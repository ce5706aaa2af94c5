"""The asyncio client, `AsyncClient`, and its job handle, `AsyncJob`: the same calls as the
blocking `Client`, as coroutines, with job events as an async iterator that reconnects by itself
when the HTTP stream breaks. The wire handling is `_core`'s, shared with the blocking client.
"""

from __future__ import annotations

import asyncio
from typing import Any, AsyncIterator, Dict, List, Optional, Union

import httpx

from . import _core
from .client import DEFAULT_TIMEOUT
from .errors import TransportError
from .types import Attenuated, Index, JobEvent, JobStatus, Session, ToolDescription


class AsyncClient:
    """An asyncio client of one gateway endpoint; see `axp_sdk.Client` for the fields."""

    def __init__(self, url: str, *, cap_token: Optional[str] = None, bearer: Optional[str] = None,
                 timeout: Union[float, httpx.Timeout] = DEFAULT_TIMEOUT,
                 http: Optional[httpx.AsyncClient] = None, max_retries: int = 5):
        self.url = url
        self.cap_token = cap_token
        self.bearer = bearer
        self.session: Optional[Session] = None
        self.max_retries = max_retries
        self._ids = _core.RpcIds()
        self._own_http = http is None
        # trust_env=False: never through a proxy from the environment (it would see the token).
        self._http = http or httpx.AsyncClient(timeout=timeout, trust_env=False)

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Closes the HTTP connections (not the session: see `close_session`)."""
        if self._own_http:
            await self._http.aclose()

    async def call(self, method: str, params: Optional[Dict[str, Any]] = None) -> Any:
        """Any AXP method by name; returns its `result` or raises the typed error."""
        body = _core.request_body(self._ids.next(), method, params)
        try:
            resp = await self._http.post(self.url, content=body,
                                         headers=_core.headers(self.cap_token, self.bearer, _core.JSON_ONLY))
        except httpx.HTTPError as e:
            raise TransportError(f"cannot reach {self.url} for `{method}`: {e!r}") from e
        return _core.result_of(_core.parse_json(resp.content, resp.status_code, method),
                               resp.status_code, method)

    async def open_session(self, *, workspace: Optional[str] = None, sandbox_tier: Optional[str] = None,
                           capabilities: Optional[List[str]] = None, ttl_s: Optional[int] = None) -> Session:
        """`session.open`; the client keeps the token for its later calls."""
        session = Session.from_json(await self.call(
            "session.open", _core.open_params(workspace, sandbox_tier, capabilities, ttl_s)))
        self.session, self.cap_token = session, session.cap_token
        return session

    async def close_session(self) -> None:
        """`session.close`: revokes the session's tokens (and every token attenuated from them)."""
        await self.call("session.close", {})
        self.session, self.cap_token = None, None

    async def attenuate(self, capabilities: List[str], *, ttl_s: Optional[int] = None,
                        cap_token: Optional[str] = None) -> Attenuated:
        """`cap.attenuate`: a strictly narrower token from this client's token (or `cap_token`)."""
        params: Dict[str, Any] = {"cap_token": cap_token or self.cap_token, "capabilities": capabilities}
        if ttl_s is not None:
            params["ttl_s"] = ttl_s
        return Attenuated.from_json(await self.call("cap.attenuate", params))

    def with_token(self, cap_token: str) -> "AsyncClient":
        """Another client of the same gateway acting with `cap_token` (connections shared)."""
        return AsyncClient(self.url, cap_token=cap_token, bearer=self.bearer, http=self._http,
                           max_retries=self.max_retries)

    async def index(self, query: Optional[str] = None, *, provider: Optional[str] = None,
                    limit: Optional[int] = None, offset: Optional[int] = None) -> Index:
        """`axp.index`: the tools this token may call, ranked by `query` when given."""
        return Index.from_json(await self.call("axp.index", _core.index_params(query, provider, limit, offset)))

    async def describe(self, name: str) -> ToolDescription:
        """`axp.describe`: one tool's signature and schema."""
        return ToolDescription.from_json(await self.call("axp.describe", {"name": name}))

    async def start(self, *, tool: Optional[str] = None, arguments: Optional[Dict[str, Any]] = None,
                    command: Union[None, str, List[str]] = None, code: Optional[Dict[str, Any]] = None,
                    cwd: Optional[str] = None, env: Optional[Dict[str, str]] = None,
                    timeout_s: Optional[int] = None, idempotency_key: Optional[str] = None,
                    pty: Optional[Dict[str, int]] = None) -> "AsyncJob":
        """`job.start` with one of `tool`+`arguments`, `command` or `code`; returns the job."""
        params = _core.start_params(tool, arguments, command, code,
                                    {"cwd": cwd, "env": env, "timeout_s": timeout_s,
                                     "idempotency_key": idempotency_key, "pty": pty})
        r = await self.call("job.start", params)
        return AsyncJob(self, r["job_id"], r.get("state"))

    def job(self, job_id: str) -> "AsyncJob":
        """A handle on a job started earlier (by this or another client of the session)."""
        return AsyncJob(self, job_id, None)

    def attach(self, job_id: str, from_seq: int = 0) -> "AsyncEventStream":
        """The job's events from `from_seq` on, streamed; see `AsyncEventStream`."""
        return AsyncEventStream(self, job_id, from_seq)

    async def jobs(self) -> List[JobStatus]:
        return [JobStatus.from_json(j) for j in (await self.call("job.list", {})).get("jobs", [])]


class AsyncEventStream:
    """A job's events, in seq order, until its `exit` event, as an async iterator that resumes
    from the first undelivered seq when the connection breaks (see `axp_sdk.EventStream`)."""

    def __init__(self, client: AsyncClient, job_id: str, from_seq: int = 0):
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

    async def __aiter__(self) -> AsyncIterator[JobEvent]:
        st = self._state
        while not st.done:
            try:
                async for ev in self._one_connection():
                    yield ev
            except (httpx.HTTPError, _core.Dropped) as e:
                await asyncio.sleep(st.failed(e))

    async def _one_connection(self) -> AsyncIterator[JobEvent]:
        st, c = self._state, self._client
        body = _core.request_body(c._ids.next(), "job.attach", st.params())
        hdrs = _core.headers(c.cap_token, c.bearer, _core.JSON_OR_SSE)
        async with c._http.stream("POST", c.url, content=body, headers=hdrs) as resp:
            status = resp.status_code
            if not _core.is_event_stream(resp.headers.get("content-type")):
                # A refusal before streaming (unknown job, bad token) comes as JSON.
                result = _core.result_of(_core.parse_json(await resp.aread(), status, "job.attach"),
                                         status, "job.attach")
                for raw in result.get("events", []):
                    ev = st.accept(raw)
                    if ev is not None:
                        yield ev
                st.finish(result)
                return
            parser = _core.SseParser()
            async for chunk in resp.aiter_bytes():
                for msg in _core.stream_messages(parser, chunk, "job.attach", status):
                    ev = _core.attach_message(st, msg, status)
                    if ev is not None:
                        yield ev
                    if st.done:
                        return
        raise _core.Dropped()


class AsyncJob:
    """A job on the gateway: `events()` streams its log, `wait()` follows it to its end."""

    def __init__(self, client: AsyncClient, job_id: str, state: Optional[str]):
        self.client = client
        self.id = job_id
        #: The state `job.start` answered (`running` or `awaiting_approval`).
        self.state = state

    def __repr__(self) -> str:
        return f"AsyncJob({self.id!r})"

    def events(self, from_seq: int = 0) -> AsyncEventStream:
        return AsyncEventStream(self.client, self.id, from_seq)

    async def wait(self) -> JobEvent:
        """Follows the log to its end and returns the `exit` event."""
        last: Optional[JobEvent] = None
        async for ev in self.events():
            if ev.kind == "exit":
                last = ev
        if last is None:
            raise TransportError(f"the log of {self.id} ended without an exit event")
        return last

    async def status(self) -> JobStatus:
        return JobStatus.from_json(await self.client.call("job.status", {"job_id": self.id}))

    async def cancel(self) -> bool:
        return bool((await self.client.call("job.cancel", {"job_id": self.id})).get("cancelled"))

    async def write(self, data: str, *, eof: bool = False) -> None:
        await self.client.call("job.write", {"job_id": self.id, "data": data, "eof": eof})

    async def signal(self, signal: str) -> None:
        await self.client.call("job.signal", {"job_id": self.id, "signal": signal})
