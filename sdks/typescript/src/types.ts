/**
 * The shapes of the gateway's results (`session.open`, `cap.attenuate`, `axp.index`,
 * `axp.describe`, `job.status`, job events) and of the params the client takes, with the
 * field names the wire uses, so a result is exactly the JSON the gateway sent.
 * @module
 */

/** The answer to `session.open`; the client keeps `cap_token` for its later calls. */
export interface Session {
  session_id: string;
  cap_token: string;
  capabilities: string[];
  granted_tier?: string;
  workspace?: string;
  expires_at_ms?: number;
  layers?: Record<string, unknown>;
  [more: string]: unknown;
}

/** `session.open`'s params. */
export interface OpenSessionParams {
  workspace?: string;
  sandbox_tier?: string;
  capabilities?: string[];
  ttl_s?: number;
}

/** The answer to `cap.attenuate`: a strictly narrower token and what it grants. */
export interface Attenuated {
  cap_token: string;
  capabilities: string[];
}

/** One line of `axp.index`. */
export interface ToolSummary {
  name: string;
  desc: string;
  signature?: string;
  unavailable?: unknown;
}

/** `axp.index`'s params. */
export interface IndexParams {
  query?: string;
  provider?: string;
  limit?: number;
  offset?: number;
}

/** The answer to `axp.index`: a page of tools and how many match in all. */
export interface Index {
  tools: ToolSummary[];
  total: number;
}

/** The answer to `axp.describe`: a tool's TypeScript signature and JSON Schema. */
export interface ToolDescription {
  name: string;
  desc: string;
  description: string;
  signature: string;
  schema: Record<string, unknown>;
  output_schema?: Record<string, unknown>;
  provider: string;
  requires: string[];
  available: boolean;
  annotations?: Record<string, unknown>;
  lint: unknown[];
  [more: string]: unknown;
}

/** What a job runs: exactly one of a tool call, a command, or a code program. */
export type JobSpec =
  | { tool: string; arguments?: Record<string, unknown> }
  | { command: string | string[] }
  | { code: { language: "python" | "javascript" | "sh"; source: string } };

/** `job.start`'s other params. */
export interface StartOptions {
  cwd?: string;
  env?: Record<string, string>;
  timeout_s?: number;
  idempotency_key?: string;
  pty?: { rows: number; cols: number };
}

/**
 * One event of a job's durable log. `kind` is `stdout`, `stderr` or `pty` (text in `data`),
 * `progress`, `log`, `result` (`output`), `tool_call`, or `exit` (`state`, `code`, `signal`,
 * `error`). `seq` numbers the events of one job from 0 without gaps.
 */
export interface JobEvent {
  job_id: string;
  seq: number;
  ts_ms: number;
  kind: "stdout" | "stderr" | "pty" | "progress" | "log" | "result" | "tool_call" | "exit" | (string & {});
  data?: unknown;
  output?: unknown;
  state?: string;
  code?: number;
  signal?: unknown;
  error?: unknown;
  [more: string]: unknown;
}

/** The answer to `job.status`. */
export interface JobStatus {
  job_id: string;
  state: string;
  next_seq: number;
  code?: number;
  signal?: unknown;
  [more: string]: unknown;
}
