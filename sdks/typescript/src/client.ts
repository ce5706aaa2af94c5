/**
 * `AxpClient`, `Job` and `EventStream`: one promise-returning method per AXP call, each
 * resolving to the typed result or rejecting with the typed error, and job events as an async
 * iterator that reconnects by itself when the HTTP stream breaks, resuming from the first seq
 * it has not delivered. HTTP is the platform's `fetch` (Node 20+, browsers, Deno, Bun).
 * @module
 */

import { AxpSdkError, ConnectionLost, TransportError, errorFromRpc } from "./errors.js";
import { SseParser } from "./sse.js";
import type {
  Attenuated,
  Index,
  IndexParams,
  JobEvent,
  JobSpec,
  JobStatus,
  OpenSessionParams,
  Session,
  StartOptions,
  ToolDescription,
} from "./types.js";

/** The header that carries a session's capability token. */
export const CAPABILITY_HEADER = "Axp-Capability";

export interface ClientOptions {
  /** Sent as `Axp-Capability`; `openSession` sets it. */
  capToken?: string;
  /** An operator's token, sent as `Authorization: Bearer` (needed with `[[operators]]`). */
  bearer?: string;
  /** How many reconnections in a row that deliver nothing a stream tries (default 5). */
  maxRetries?: number;
  /** The `fetch` to use (default: the global one). */
  fetch?: typeof fetch;
}

interface Shared {
  nextId: number;
}

/** A client of one gateway endpoint, e.g. `http://127.0.0.1:7878/axp`. */
export class AxpClient {
  readonly url: string;
  capToken: string | undefined;
  bearer: string | undefined;
  session: Session | undefined;
  readonly maxRetries: number;
  private readonly fetchImpl: typeof fetch;
  private readonly ids: Shared;

  constructor(url: string, opts: ClientOptions = {}, ids?: Shared) {
    this.url = url;
    this.capToken = opts.capToken;
    this.bearer = opts.bearer;
    this.maxRetries = opts.maxRetries ?? 5;
    this.fetchImpl = opts.fetch ?? globalThis.fetch.bind(globalThis);
    this.ids = ids ?? { nextId: 1 };
  }

  /** Any AXP method by name; resolves to its `result` or rejects with the typed error. */
  async call<T = unknown>(method: string, params?: Record<string, unknown>): Promise<T> {
    const resp = await this.post(method, params, "application/json");
    const text = await resp.text().catch((cause: unknown) => {
      throw new TransportError(`reading the answer to \`${method}\` failed`, { status: resp.status, cause });
    });
    return resultOf(parseJson(text, resp.status, method), resp.status, method) as T;
  }

  /** `session.open`; the client keeps the token for its later calls. */
  async openSession(params: OpenSessionParams = {}): Promise<Session> {
    const session = await this.call<Session>("session.open", { ...params });
    this.session = session;
    this.capToken = session.cap_token;
    return session;
  }

  /** `session.close`: revokes the session's tokens (and every token attenuated from them). */
  async closeSession(): Promise<void> {
    await this.call("session.close", {});
    this.session = undefined;
    this.capToken = undefined;
  }

  /**
   * `cap.attenuate`: a strictly narrower token, e.g. for a sub-agent, from this client's token
   * (or `capToken`). Asking for more than the token holds rejects with `CapabilityDenied`.
   */
  async attenuate(capabilities: string[], opts: { ttl_s?: number; capToken?: string } = {}): Promise<Attenuated> {
    const params: Record<string, unknown> = { cap_token: opts.capToken ?? this.capToken, capabilities };
    if (opts.ttl_s !== undefined) params.ttl_s = opts.ttl_s;
    return this.call<Attenuated>("cap.attenuate", params);
  }

  /** Another client of the same gateway acting with `capToken`. */
  withToken(capToken: string): AxpClient {
    return new AxpClient(
      this.url,
      { capToken, bearer: this.bearer, maxRetries: this.maxRetries, fetch: this.fetchImpl },
      this.ids,
    );
  }

  /** `axp.index`: the tools this token may call, ranked by `query` when given. */
  async index(query?: string, params: Omit<IndexParams, "query"> = {}): Promise<Index> {
    return this.call<Index>("axp.index", query === undefined ? { ...params } : { ...params, query });
  }

  /** `axp.describe`: one tool's signature and schema. */
  async describe(name: string): Promise<ToolDescription> {
    return this.call<ToolDescription>("axp.describe", { name });
  }

  /** `job.start`: a tool call, a command or a code program; resolves to the job. */
  async start(spec: JobSpec, opts: StartOptions = {}): Promise<Job> {
    const chosen = ["tool", "command", "code"].filter((k) => k in spec);
    if (chosen.length !== 1) throw new TypeError("job.start takes exactly one of tool, command or code");
    const params: Record<string, unknown> = { ...spec, ...opts };
    if ("tool" in spec) params.arguments = spec.arguments ?? {};
    const r = await this.call<{ job_id: string; state?: string }>("job.start", params);
    return new Job(this, r.job_id, r.state);
  }

  /** A handle on a job started earlier (by this or another client of the session). */
  job(jobId: string): Job {
    return new Job(this, jobId, undefined);
  }

  /** The job's events from `fromSeq` on, streamed; see `EventStream`. */
  attach(jobId: string, fromSeq = 0): EventStream {
    return new EventStream(this, jobId, fromSeq);
  }

  /** `job.list`: this session's jobs. */
  async jobs(): Promise<JobStatus[]> {
    return (await this.call<{ jobs: JobStatus[] }>("job.list", {})).jobs;
  }

  /** @internal Sends one request; network failures reject with `TransportError`. */
  async post(method: string, params: Record<string, unknown> | undefined, accept: string): Promise<Response> {
    const msg: Record<string, unknown> = { jsonrpc: "2.0", id: this.ids.nextId++, method };
    if (params !== undefined) msg.params = params;
    const headers: Record<string, string> = { "Content-Type": "application/json", Accept: accept };
    if (this.capToken) headers[CAPABILITY_HEADER] = this.capToken;
    if (this.bearer) headers.Authorization = `Bearer ${this.bearer}`;
    try {
      return await this.fetchImpl(this.url, { method: "POST", headers, body: JSON.stringify(msg) });
    } catch (cause) {
      throw new TransportError(`cannot reach ${this.url} for \`${method}\`: ${String(cause)}`, { cause });
    }
  }
}

function parseJson(text: string, status: number, method: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    throw new TransportError(
      `\`${method}\` answered HTTP ${status} with a body that is not JSON: ${text.slice(0, 200)}`,
      { status, body: text },
    );
  }
}

/**
 * The `result` of a JSON-RPC response, or its error thrown as the typed exception. The gateway
 * sends JSON-RPC errors with non-2xx statuses too (401 for a bad credential, 404 for a session
 * that is gone); those are read like any other error.
 */
function resultOf(message: unknown, status: number, method: string): unknown {
  const m = message as Record<string, unknown> | null;
  if (!m || typeof m !== "object" || m.jsonrpc !== "2.0") {
    throw new TransportError(`\`${method}\` answered HTTP ${status} with something else than a JSON-RPC response`, {
      status,
      body: JSON.stringify(message),
    });
  }
  if ("error" in m) throw errorFromRpc(m.error, status);
  if (!("result" in m)) {
    throw new TransportError(`\`${method}\` answered HTTP ${status} with neither a result nor an error`, {
      status,
      body: JSON.stringify(message),
    });
  }
  return m.result;
}

/** The event stream ended before the response that closes it. */
class Dropped extends Error {}

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/**
 * A job's events, in seq order, until its `exit` event.
 *
 * Iterating sends `job.attach` asking for an event stream (SSE). When the connection breaks
 * before the job's log is finished, even in the middle of a message, the stream reconnects with
 * `from_seq` set to the first seq it has not delivered and skips anything older, so the caller
 * sees every event exactly once. `reconnects` counts the reconnections; after `maxRetries`
 * consecutive tries that deliver nothing it rejects with `ConnectionLost`. Typed errors (an
 * unknown job, a revoked token) reject at once and are not retried.
 */
export class EventStream implements AsyncIterable<JobEvent> {
  readonly jobId: string;
  /** The first seq not yet delivered. */
  nextSeq: number;
  /** Whether the job's whole log (to its end) has been delivered. */
  done = false;
  /** How many times the stream reconnected. */
  reconnects = 0;
  private failures = 0;

  constructor(
    private readonly client: AxpClient,
    jobId: string,
    fromSeq = 0,
  ) {
    this.jobId = jobId;
    this.nextSeq = fromSeq;
  }

  async *[Symbol.asyncIterator](): AsyncIterator<JobEvent> {
    while (!this.done) {
      try {
        yield* this.oneConnection();
      } catch (err) {
        // The SDK's own errors (a refusal from the gateway, an answer that is not JSON-RPC)
        // are the answer; anything else is the connection failing, and is retried.
        if (err instanceof AxpSdkError) throw err;
        this.failures += 1;
        if (this.failures > this.client.maxRetries) {
          throw new ConnectionLost(
            `the event stream of ${this.jobId} broke ${this.failures} times in a row (last: ${String(err)}); ` +
              `resume with fromSeq=${this.nextSeq}`,
            { cause: err },
          );
        }
        this.reconnects += 1;
        await sleep(Math.min(50 * 2 ** (this.failures - 1), 2000));
      }
    }
  }

  /** Collects every event to the end of the log. */
  async toArray(): Promise<JobEvent[]> {
    const out: JobEvent[] = [];
    for await (const ev of this) out.push(ev);
    return out;
  }

  private accept(raw: unknown): JobEvent | undefined {
    const ev = raw as JobEvent | null;
    if (!ev || typeof ev !== "object" || ev.job_id !== this.jobId || typeof ev.seq !== "number") return undefined;
    if (ev.seq < this.nextSeq) return undefined;
    this.nextSeq = ev.seq + 1;
    this.failures = 0;
    return ev;
  }

  private finish(result: unknown): void {
    const r = result as { next_seq?: unknown; done?: unknown } | null;
    if (r && typeof r === "object") {
      if (typeof r.next_seq === "number") this.nextSeq = Math.max(this.nextSeq, r.next_seq);
      this.done = r.done === true;
    }
  }

  private async *oneConnection(): AsyncGenerator<JobEvent> {
    const method = "job.attach";
    let resp: Response;
    try {
      resp = await this.client.post(method, { job_id: this.jobId, from_seq: this.nextSeq }, "application/json, text/event-stream");
    } catch (err) {
      // Retried like a broken stream: the gateway may be restarting or a proxy reconnecting.
      throw err instanceof TransportError ? (err.cause ?? err) : err;
    }
    const status = resp.status;
    const type = (resp.headers.get("content-type") ?? "").split(";")[0]!.trim();
    if (type !== "text/event-stream" || !resp.body) {
      // The gateway answers in JSON when it refuses before streaming (an unknown job, a bad
      // token): that error is the answer, not a broken stream.
      const result = resultOf(parseJson(await resp.text(), status, method), status, method) as {
        events?: unknown[];
      };
      for (const raw of result.events ?? []) {
        const ev = this.accept(raw);
        if (ev) yield ev;
      }
      this.finish(result);
      return;
    }
    const reader = resp.body.getReader();
    const parser = new SseParser();
    try {
      for (;;) {
        const { done, value } = await reader.read();
        if (done) break;
        for (const data of parser.feed(value)) {
          let msg: Record<string, unknown>;
          try {
            msg = JSON.parse(data) as Record<string, unknown>;
          } catch {
            throw new TransportError(`\`${method}\` streamed an event that is not JSON: ${data.slice(0, 200)}`, {
              status,
              body: data,
            });
          }
          if (msg.method === "job.event") {
            const ev = this.accept(msg.params);
            if (ev) yield ev;
          } else if ("id" in msg && ("result" in msg || "error" in msg)) {
            this.finish(resultOf(msg, status, method));
            // A response that is not the end (the gateway stopped replaying): ask again.
            if (!this.done) throw new Dropped("the stream's response says the log goes on");
            return;
          }
        }
      }
    } finally {
      // Also when the caller stops iterating early: the connection is closed, not left open.
      await reader.cancel().catch(() => undefined);
    }
    throw new Dropped("the event stream ended before its response");
  }
}

/** A job on the gateway: `events()` streams its log, `wait()` follows it to its end. */
export class Job {
  constructor(
    readonly client: AxpClient,
    readonly id: string,
    /** The state `job.start` answered (`running` or `awaiting_approval`). */
    readonly state: string | undefined,
  ) {}

  events(fromSeq = 0): EventStream {
    return new EventStream(this.client, this.id, fromSeq);
  }

  /** Follows the log to its end and resolves to the `exit` event. */
  async wait(): Promise<JobEvent> {
    let last: JobEvent | undefined;
    for await (const ev of this.events()) if (ev.kind === "exit") last = ev;
    if (!last) throw new TransportError(`the log of ${this.id} ended without an exit event`);
    return last;
  }

  async status(): Promise<JobStatus> {
    return this.client.call<JobStatus>("job.status", { job_id: this.id });
  }

  async cancel(): Promise<boolean> {
    return (await this.client.call<{ cancelled: boolean }>("job.cancel", { job_id: this.id })).cancelled;
  }

  async write(data: string, opts: { eof?: boolean } = {}): Promise<void> {
    await this.client.call("job.write", { job_id: this.id, data, eof: opts.eof ?? false });
  }

  async signal(signal: string): Promise<void> {
    await this.client.call("job.signal", { job_id: this.id, signal });
  }
}
