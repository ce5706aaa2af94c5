/**
 * `AxpClient` against a real gateway: sessions, index/describe, command and tool jobs streamed
 * to their end, streams that resume after their connection is cut (by hand between events, and
 * by a relay that cuts every connection after a few hundred bytes, inside messages), typed
 * errors with `data.reason`, and `cap.attenuate`.
 * @module
 */

import assert from "node:assert/strict";
import { writeFileSync } from "node:fs";
import net from "node:net";
import path from "node:path";
import { after, before, describe, test } from "node:test";

import {
  AxpClient,
  AxpError,
  CapabilityDenied,
  TransportError,
  Unauthorized,
  UnknownJob,
  UnknownTool,
  type JobEvent,
} from "../src/index.js";
import { CutProxy, startGateway, type Gateway } from "./gateway.js";

/** A command that prints `line 1` .. `line n`, one every `pause` seconds. */
function countingJob(n: number, pause = "0.02"): { command: string[] } {
  const script = `i=1; while [ "$i" -le ${n} ]; do echo "line $i"; i=$((i+1)); sleep ${pause}; done`;
  return { command: ["sh", "-c", script] };
}

function expectedLines(n: number): string {
  let s = "";
  for (let i = 1; i <= n; i++) s += `line ${i}\n`;
  return s;
}

/** Every event exactly once, in order: seqs without gap or repeat, all the lines once, one exit. */
function checkLog(events: JobEvent[], n: number, firstSeq = 0): void {
  assert.deepEqual(
    events.map((e) => e.seq),
    events.map((_, i) => firstSeq + i),
  );
  assert.equal(
    events
      .filter((e) => e.kind === "stdout")
      .map((e) => e.data)
      .join(""),
    expectedLines(n),
  );
  assert.equal(events.filter((e) => e.kind === "exit").length, 1);
  const last = events[events.length - 1]!;
  assert.equal(last.kind, "exit");
  assert.equal(last.state, "exited");
  assert.equal(last.code, 0);
}

let gw: Gateway;
const proxies: CutProxy[] = [];

before(async () => {
  gw = await startGateway();
});

after(async () => {
  for (const p of proxies) await p.close();
  await gw?.stop();
});

async function session(): Promise<AxpClient> {
  const c = new AxpClient(gw.url);
  await c.openSession();
  return c;
}

async function proxy(cutAfterBytes?: number): Promise<CutProxy> {
  const p = await CutProxy.start(gw.url, cutAfterBytes);
  proxies.push(p);
  return p;
}

describe("sessions and tools", () => {
  test("session.open, axp.index and axp.describe", async () => {
    const c = await session();
    assert.ok(c.session?.session_id.startsWith("s_"));
    assert.ok(c.session?.capabilities.includes("proc.spawn"));
    const index = await c.index("read a file");
    assert.equal(index.tools[0]?.name, "files__read_file");
    assert.ok(index.total >= index.tools.length);
    assert.equal((await c.index(undefined, { limit: 1 })).tools.length, 1);
    const d = await c.describe("files__read_file");
    assert.equal(d.name, "files__read_file");
    assert.equal(d.provider, "files");
    assert.match(d.signature, /path/);
    assert.deepEqual((d.schema.properties as Record<string, { type: string }>).path?.type, "string");
  });
});

describe("jobs", () => {
  test("a command job's events stream to its exit", async () => {
    const c = await session();
    const job = await c.start(countingJob(20));
    assert.match(job.id, /^j_/);
    assert.equal(job.state, "running");
    const stream = job.events();
    const events = await stream.toArray();
    checkLog(events, 20);
    assert.equal(stream.done, true);
    assert.equal(stream.reconnects, 0);
    assert.equal(stream.nextSeq, events[events.length - 1]!.seq + 1);
    assert.equal((await job.status()).state, "exited");
  });

  test("a tool job gives its result", async () => {
    const c = await session();
    writeFileSync(path.join(gw.workspace, "hello-ts.txt"), "hello from the workspace\n");
    const job = await c.start({ tool: "files__read_file", arguments: { path: "hello-ts.txt" } });
    const events = await job.events().toArray();
    const results = events.filter((e) => e.kind === "result");
    assert.equal(results.length, 1);
    assert.match(JSON.stringify(results[0]!.output), /hello from the workspace/);
    assert.equal(events[events.length - 1]!.kind, "exit");
  });

  test("attach from a seq gives only the rest of the log", async () => {
    const c = await session();
    const job = await c.start(countingJob(8, "0"));
    const everything = await job.events().toArray();
    const tail = await c.attach(job.id, 3).toArray();
    assert.deepEqual(tail, everything.slice(3));
    const past = c.attach(job.id, everything[everything.length - 1]!.seq + 1);
    assert.deepEqual(await past.toArray(), []);
    assert.equal(past.done, true);
  });

  test("two jobs stream at once", async () => {
    const c = await session();
    const [a, b] = await Promise.all([c.start(countingJob(10)), c.start(countingJob(12))]);
    const [ea, eb] = await Promise.all([a.events().toArray(), b.events().toArray()]);
    checkLog(ea, 10);
    checkLog(eb, 12);
    assert.equal((await a.wait()).code, 0);
  });

  test("stopping iteration early closes the stream", async () => {
    const c = await session();
    const job = await c.start(countingJob(50, "0.02"));
    const seen: JobEvent[] = [];
    for await (const ev of job.events()) {
      seen.push(ev);
      if (seen.length === 3) break;
    }
    assert.deepEqual(
      seen.map((e) => e.seq),
      [0, 1, 2],
    );
    assert.equal(await job.cancel(), true);
  });
});

describe("cancelling", () => {
  test("cancel ends a running job killed, and jobs() lists it", async () => {
    const c = await session();
    const job = await c.start({ command: ["sh", "-c", "echo started; sleep 60"] });
    for await (const ev of job.events()) {
      assert.equal(ev.kind, "stdout");
      assert.equal(ev.data, "started\n");
      break;
    }
    assert.equal(await job.cancel(), true);
    assert.equal((await job.wait()).state, "killed");
    assert.equal(await job.cancel(), false); // it had already ended
    const listed = (await c.jobs()).find((j) => j.job_id === job.id);
    assert.equal(listed?.state, "killed");
  });
});

describe("resuming after a dropped connection", () => {
  test("a stream cut between events resumes without loss or repetition", async () => {
    const direct = await session();
    const p = await proxy();
    const c = new AxpClient(p.url, { capToken: direct.capToken });
    const job = await c.start(countingJob(40, "0.03"));
    const stream = job.events();
    const events: JobEvent[] = [];
    for await (const ev of stream) {
      events.push(ev);
      // The job is still printing: the rest of its log must come over a new connection.
      if (events.length === 5) assert.ok(p.cut() > 0);
    }
    checkLog(events, 40);
    assert.ok(stream.reconnects >= 1, `reconnects: ${stream.reconnects}`);
    assert.ok(p.accepted >= 2);
  });

  test("cuts inside SSE messages, again and again, lose and repeat nothing", async () => {
    // Every connection carries at most 700 bytes from the gateway: the HTTP head and two or
    // three events, then it breaks wherever that is, mostly in the middle of a message.
    const direct = await session();
    const p = await proxy(700);
    const job = await direct.start(countingJob(30, "0.01"));
    const c = new AxpClient(p.url, { capToken: direct.capToken, maxRetries: 10 });
    const stream = c.attach(job.id);
    const events = await stream.toArray();
    checkLog(events, 30);
    assert.ok(stream.reconnects >= 5, `reconnects: ${stream.reconnects}`);
    assert.equal(p.accepted, stream.reconnects + 1);
  });
});

describe("typed errors", () => {
  test("an unknown tool is UnknownTool with data.reason", async () => {
    const c = await session();
    const err = await c.start({ tool: "nope__missing", arguments: {} }).catch((e: unknown) => e);
    assert.ok(err instanceof UnknownTool);
    assert.ok(err instanceof AxpError);
    assert.equal(err.code, -32004);
    assert.equal(err.rpcName, "UnknownTool");
    assert.match(err.reason ?? "", /nope__missing/);
    await assert.rejects(c.describe("files__read_fil"), (e: unknown) => {
      assert.ok(e instanceof UnknownTool);
      assert.match(e.reason ?? "", /files__read_file/); // the gateway's "did you mean"
      return true;
    });
  });

  test("a forged token is Unauthorized", async () => {
    const c = await session();
    const t = c.capToken!;
    const i = t.length - 5;
    const forged = t.slice(0, i) + (t[i] === "A" ? "B" : "A") + t.slice(i + 1);
    await assert.rejects(c.withToken(forged).index(), (e: unknown) => {
      assert.ok(e instanceof Unauthorized);
      assert.equal(e.code, -32001);
      assert.match(e.reason ?? "", /forged|signature/);
      return true;
    });
  });

  test("an unknown job is raised at once, not retried", async () => {
    const c = await session();
    const stream = c.attach("j_00000000000000000000000000000000");
    await assert.rejects(stream.toArray(), UnknownJob);
    assert.equal(stream.reconnects, 0);
  });

  test("nothing listening is a TransportError, not an AxpError", async () => {
    const port = await new Promise<number>((resolve) => {
      const s = net.createServer().listen(0, "127.0.0.1", () => {
        const p = (s.address() as net.AddressInfo).port;
        s.close(() => resolve(p));
      });
    });
    const err = await new AxpClient(`http://127.0.0.1:${port}/axp`).index().catch((e: unknown) => e);
    assert.ok(err instanceof TransportError);
    assert.ok(!(err instanceof AxpError));
  });
});

describe("cap.attenuate", () => {
  test("an attenuated token is strictly narrower", async () => {
    const c = await session();
    const att = await c.attenuate(["tool(files__read_file)"], { ttl_s: 60 });
    assert.deepEqual(att.capabilities, ["tool(files__read_file)"]);
    const sub = c.withToken(att.cap_token);
    assert.deepEqual(
      (await sub.index()).tools.map((t) => t.name),
      ["files__read_file"],
    );
    assert.equal((await sub.describe("files__read_file")).name, "files__read_file");
    for (const [attempt, missing] of [
      [() => sub.describe("files__run_command"), "tool(files__run_command)"],
      [() => sub.start({ command: ["true"] }), "proc.spawn"],
      [() => sub.attenuate(["tool(*)"]), "tool(*)"],
    ] as const) {
      await assert.rejects(attempt(), (e: unknown) => {
        assert.ok(e instanceof CapabilityDenied);
        assert.equal(e.data.missing, missing);
        assert.ok(e.reason);
        return true;
      });
    }
  });

  test("closing the session revokes its tokens and their children", async () => {
    const c = await session();
    const child = (await c.attenuate(["tool(files__read_file)"])).cap_token;
    const parent = c.capToken!;
    await c.closeSession();
    for (const token of [parent, child]) {
      await assert.rejects(c.withToken(token).index(), (e: unknown) => {
        assert.ok(e instanceof Unauthorized);
        assert.match(e.reason ?? "", /revoked/);
        return true;
      });
    }
  });
});
