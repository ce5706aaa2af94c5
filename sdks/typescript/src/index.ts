/**
 * axp-sdk: a typed client of an AXP gateway's `/axp` endpoint. `AxpClient` opens sessions,
 * searches and describes tools, starts jobs and streams their events as async iterators
 * (resuming after a dropped connection without losing or repeating one), attenuates tokens,
 * and rejects a JSON-RPC error as the `AxpError` subclass of its code with `data.reason` on it.
 * @module
 */

export { AxpClient, CAPABILITY_HEADER, EventStream, Job } from "./client.js";
export type { ClientOptions } from "./client.js";
export {
  ApprovalRequired,
  AxpError,
  AxpSdkError,
  CapabilityDenied,
  ConnectionLost,
  InternalError,
  InvalidParams,
  InvalidRequest,
  LimitExceeded,
  MethodNotFound,
  ParseError,
  ProviderUnavailable,
  TierUnavailable,
  TransportError,
  Unauthorized,
  UnknownJob,
  UnknownSession,
  UnknownTool,
  errorFromRpc,
} from "./errors.js";
export type { RpcErrorObject } from "./errors.js";
export type {
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
  ToolSummary,
} from "./types.js";
