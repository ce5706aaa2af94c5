"""The asyncio `AsyncClient` against a real gateway: the same surface as the blocking client
(sessions, index/describe, streamed jobs, resuming after cut connections, typed errors,
attenuation), each test driving its coroutine with `asyncio.run`.
"""

from __future__ import annotations

import asyncio
from typing import List

import pytest

from axp_sdk import AsyncClient, CapabilityDenied, JobEvent, Unauthorized, UnknownJob, UnknownTool
from test_sync import check_log, counting_job


def run(coro):
    return asyncio.run(coro)


def test_async_session_index_and_describe(gateway) -> None:
    async def go() -> None:
        async with AsyncClient(gateway.url) as c:
            s = await c.open_session()
            assert c.cap_token == s.cap_token
            index = await c.index("run a command")
            assert index.tools[0].name == "files__run_command"
            d = await c.describe("files__list_files")
            assert "path" in d.schema["properties"]
    run(go())


def test_async_command_job_streams_every_line(gateway) -> None:
    async def go() -> None:
        async with AsyncClient(gateway.url) as c:
            await c.open_session()
            job = await c.start(command=counting_job(15))
            stream = job.events()
            events = [ev async for ev in stream]
            check_log(events, 15)
            assert stream.reconnects == 0
            assert (await job.wait()).code == 0
    run(go())


def test_async_two_jobs_stream_concurrently(gateway) -> None:
    async def go() -> None:
        async with AsyncClient(gateway.url) as c:
            await c.open_session()
            a, b = await asyncio.gather(c.start(command=counting_job(10)), c.start(command=counting_job(12)))
            ea, eb = await asyncio.gather(collect(a.events()), collect(b.events()))
            check_log(ea, 10)
            check_log(eb, 12)
    run(go())


async def collect(stream) -> List[JobEvent]:
    return [ev async for ev in stream]


def test_async_stream_resumes_after_its_connection_is_cut(gateway, proxy_factory) -> None:
    proxy = proxy_factory()

    async def go() -> None:
        async with AsyncClient(gateway.url) as direct:
            await direct.open_session()
            async with AsyncClient(proxy.url, cap_token=direct.cap_token) as c:
                job = await c.start(command=counting_job(40, "0.03"))
                stream = job.events()
                events: List[JobEvent] = []
                async for ev in stream:
                    events.append(ev)
                    if len(events) == 5:
                        assert proxy.cut() > 0
                check_log(events, 40)
                assert stream.reconnects >= 1 and proxy.accepted >= 2
    run(go())


def test_async_stream_resumes_when_cuts_fall_inside_messages(gateway, proxy_factory) -> None:
    proxy = proxy_factory(cut_after_bytes=700)

    async def go() -> None:
        async with AsyncClient(gateway.url) as direct:
            await direct.open_session()
            job = await direct.start(command=counting_job(30, "0.01"))
            async with AsyncClient(proxy.url, cap_token=direct.cap_token, max_retries=10) as c:
                stream = c.attach(job.id)
                events = await collect(stream)
                check_log(events, 30)
                assert stream.reconnects >= 5
                assert proxy.accepted == stream.reconnects + 1
    run(go())


def test_async_typed_errors_and_attenuation(gateway) -> None:
    async def go() -> None:
        async with AsyncClient(gateway.url) as c:
            await c.open_session()
            with pytest.raises(UnknownTool) as e:
                await c.start(tool="nope__missing")
            assert "nope__missing" in e.value.reason
            with pytest.raises(UnknownJob):
                await collect(c.attach("j_00000000000000000000000000000000"))
            att = await c.attenuate(["tool(files__list_files)"], ttl_s=30)
            sub = c.with_token(att.cap_token)
            assert [t.name for t in (await sub.index()).tools] == ["files__list_files"]
            with pytest.raises(CapabilityDenied) as e:
                await sub.describe("files__read_file")
            assert e.value.data["missing"] == "tool(files__read_file)"
            await c.close_session()
            with pytest.raises(Unauthorized) as e:
                await sub.index()
            assert "revoked" in e.value.reason
    run(go())
