"""The blocking `Client` against a real gateway: sessions, index/describe, command and tool
jobs streamed to their end, streams that resume after their connection is cut (by hand between
events, and by a relay that cuts every connection after a few hundred bytes, inside messages),
typed errors with `data.reason`, and `cap.attenuate`.
"""

from __future__ import annotations

from typing import List

import pytest

from axp_sdk import (
    AxpError,
    CapabilityDenied,
    Client,
    JobEvent,
    TransportError,
    Unauthorized,
    UnknownJob,
    UnknownTool,
)


def counting_job(n: int, pause: str = "0.02") -> List[str]:
    """A command that prints `line 1` .. `line n`, one every `pause` seconds."""
    script = f'i=1; while [ "$i" -le {n} ]; do echo "line $i"; i=$((i+1)); sleep {pause}; done'
    return ["sh", "-c", script]


def expected_lines(n: int) -> str:
    return "".join(f"line {i}\n" for i in range(1, n + 1))


def check_log(events: List[JobEvent], n: int, first_seq: int = 0) -> None:
    """Every event exactly once, in order: seqs without gap or repeat, all the lines once,
    one exit at the end."""
    assert [e.seq for e in events] == list(range(first_seq, first_seq + len(events)))
    assert "".join(e.data for e in events if e.kind == "stdout") == expected_lines(n)
    assert [e.kind for e in events].count("exit") == 1
    assert events[-1].kind == "exit" and events[-1].state == "exited" and events[-1].code == 0


def test_session_index_and_describe(client: Client) -> None:
    assert client.session is not None
    assert client.session.session_id.startswith("s_")
    assert "proc.spawn" in client.session.capabilities
    index = client.index("read a file")
    names = [t.name for t in index.tools]
    assert names[0] == "files__read_file", names
    assert index.total >= len(index.tools)
    assert client.index(limit=1).tools.__len__() == 1
    d = client.describe("files__read_file")
    assert d.name == "files__read_file" and d.provider == "files"
    assert "path" in d.signature
    assert d.schema["properties"]["path"]["type"] == "string"
    assert d.available


def test_command_job_streams_every_line(client: Client) -> None:
    job = client.start(command=counting_job(20))
    assert job.id.startswith("j_") and job.state == "running"
    stream = job.events()
    events = list(stream)
    check_log(events, 20)
    assert stream.done and stream.reconnects == 0 and stream.next_seq == events[-1].seq + 1
    assert job.status().state == "exited"


def test_tool_job_gives_its_result(client: Client, gateway) -> None:
    (gateway.workspace / "hello.txt").write_text("hello from the workspace\n")
    job = client.start(tool="files__read_file", arguments={"path": "hello.txt"})
    events = list(job.events())
    results = [e for e in events if e.kind == "result"]
    assert len(results) == 1
    assert "hello from the workspace" in str(results[0].output)
    assert events[-1].kind == "exit" and events[-1].state == "exited"


def test_attach_from_a_seq_gives_only_the_rest(client: Client) -> None:
    job = client.start(command=counting_job(8, "0"))
    everything = list(job.events())
    tail = list(client.attach(job.id, from_seq=3))
    assert [e.seq for e in tail] == [e.seq for e in everything[3:]]
    assert tail == everything[3:]
    # Past the end of a finished log: nothing, and done.
    past = client.attach(job.id, from_seq=everything[-1].seq + 1)
    assert list(past) == [] and past.done


def test_stream_resumes_after_its_connection_is_cut(client: Client, proxy_factory) -> None:
    proxy = proxy_factory()
    via_proxy = Client(proxy.url, cap_token=client.cap_token)
    job = via_proxy.start(command=counting_job(40, "0.03"))
    stream = job.events()
    events: List[JobEvent] = []
    for ev in stream:
        events.append(ev)
        if len(events) == 5:
            # The job is still printing: the rest of its log must come over a new connection.
            assert proxy.cut() > 0
    check_log(events, 40)
    assert stream.reconnects >= 1
    assert proxy.accepted >= 2


def test_stream_resumes_when_cuts_fall_inside_messages(client: Client, proxy_factory) -> None:
    # Every connection carries at most 700 bytes from the gateway: the HTTP head and two or
    # three events, then it breaks wherever that is, mostly in the middle of an SSE message.
    proxy = proxy_factory(cut_after_bytes=700)
    job = client.start(command=counting_job(30, "0.01"))
    via_proxy = Client(proxy.url, cap_token=client.cap_token, max_retries=10)
    stream = via_proxy.attach(job.id)
    events = list(stream)
    check_log(events, 30)
    assert stream.reconnects >= 5, stream.reconnects
    assert proxy.accepted == stream.reconnects + 1


def test_unknown_tool_is_a_typed_error_with_its_reason(client: Client) -> None:
    with pytest.raises(UnknownTool) as e:
        client.start(tool="nope__missing", arguments={})
    assert e.value.code == -32004
    assert e.value.name == "UnknownTool"
    assert "nope__missing" in e.value.reason
    assert isinstance(e.value, AxpError)
    with pytest.raises(UnknownTool) as e:
        client.describe("files__read_fil")
    assert "files__read_file" in e.value.reason  # the gateway's "did you mean"


def test_forged_token_is_unauthorized(client: Client) -> None:
    token = client.cap_token
    assert token is not None
    i = len(token) - 5
    forged = token[:i] + ("A" if token[i] != "A" else "B") + token[i + 1:]
    with pytest.raises(Unauthorized) as e:
        client.with_token(forged).index()
    assert e.value.code == -32001
    assert "forged" in e.value.reason or "signature" in e.value.reason


def test_unknown_job_is_raised_not_retried(client: Client) -> None:
    stream = client.attach("j_00000000000000000000000000000000")
    with pytest.raises(UnknownJob) as e:
        list(stream)
    assert e.value.reason and stream.reconnects == 0


def test_attenuated_token_is_strictly_narrower(client: Client) -> None:
    att = client.attenuate(["tool(files__read_file)"], ttl_s=60)
    assert att.capabilities == ["tool(files__read_file)"]
    sub = client.with_token(att.cap_token)
    assert [t.name for t in sub.index().tools] == ["files__read_file"]
    assert sub.describe("files__read_file").name == "files__read_file"
    with pytest.raises(CapabilityDenied) as e:
        sub.describe("files__run_command")
    assert e.value.data["missing"] == "tool(files__run_command)"
    with pytest.raises(CapabilityDenied) as e:
        sub.start(command=["true"])
    assert e.value.data["missing"] == "proc.spawn"
    # A token cannot widen itself again.
    with pytest.raises(CapabilityDenied) as e:
        sub.attenuate(["tool(*)"])
    assert e.value.data["missing"] == "tool(*)" and e.value.reason


def test_closing_the_session_revokes_its_tokens(gateway) -> None:
    with Client(gateway.url) as c:
        c.open_session()
        child = c.attenuate(["tool(files__read_file)"]).cap_token
        parent = c.cap_token
        c.close_session()
        for token in (parent, child):
            with pytest.raises(Unauthorized) as e:
                c.with_token(token).index()
            assert "revoked" in e.value.reason


def test_nothing_listening_is_a_transport_error(gateway) -> None:
    import socket

    # A port that was free a moment ago: nothing listens there.
    s = socket.create_server(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    with Client(f"http://127.0.0.1:{port}/axp") as c:
        with pytest.raises(TransportError) as e:
            c.index()
    assert not isinstance(e.value, AxpError)


def test_cancel_ends_a_running_job_and_jobs_lists_it(client: Client) -> None:
    job = client.start(command=["sh", "-c", "echo started; sleep 60"])
    stream = job.events()
    first = next(iter(stream))
    assert first.kind == "stdout" and first.data == "started\n"
    assert job.cancel() is True
    exit_event = job.wait()
    assert exit_event.state == "killed"
    assert job.cancel() is False  # it had already ended
    listed = {j.job_id: j for j in client.jobs()}
    assert listed[job.id].state == "killed" and listed[job.id].finished
