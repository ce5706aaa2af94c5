/**
 * The SSE framing on its own: an event stream split at every possible byte (inside a field
 * name, inside a multi-byte character, between CR and LF) gives the same messages, and
 * comments, ids and event names are skipped.
 * @module
 */

import assert from "node:assert/strict";
import { test } from "node:test";

import { SseParser } from "../src/sse.js";

const STREAM = new TextEncoder().encode(
  ': keep-alive\n\nid: j:1\ndata: {"a":"é→"}\n\r\ndata:{"b":\ndata: 2}\n\nevent: x\nretry: 5\n',
);
const WANT = ['{"a":"é→"}', '{"b":\n2}'];

test("messages are the same wherever the chunks end", () => {
  for (let cut = 0; cut <= STREAM.length; cut++) {
    const p = new SseParser();
    const got = [...p.feed(STREAM.subarray(0, cut)), ...p.feed(STREAM.subarray(cut))];
    assert.deepEqual(got, WANT, `cut at ${cut}`);
  }
});

test("a byte at a time", () => {
  const p = new SseParser();
  const got: string[] = [];
  for (let i = 0; i < STREAM.length; i++) got.push(...p.feed(STREAM.subarray(i, i + 1)));
  assert.deepEqual(got, WANT);
});
