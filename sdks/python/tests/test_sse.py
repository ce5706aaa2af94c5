"""The SSE framing on its own: an event stream split at every possible byte (inside a field
name, inside a multi-byte character, between CR and LF) gives the same messages, and comments,
ids and event names are skipped."""

from __future__ import annotations

from axp_sdk._core import SseParser

STREAM = (": keep-alive\n\nid: j:1\ndata: {\"a\":\"é→\"}\n\r\n"
          "data:{\"b\":\ndata: 2}\n\nevent: x\nretry: 5\n").encode()


def test_messages_are_the_same_wherever_the_chunks_end() -> None:
    for cut in range(len(STREAM) + 1):
        p = SseParser()
        got = list(p.feed(STREAM[:cut])) + list(p.feed(STREAM[cut:]))
        assert got == ['{"a":"é→"}', '{"b":\n2}'], cut


def test_byte_at_a_time() -> None:
    p = SseParser()
    got = [m for i in range(len(STREAM)) for m in p.feed(STREAM[i:i + 1])]
    assert got == ['{"a":"é→"}', '{"b":\n2}']
