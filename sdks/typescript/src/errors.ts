/**
 * The errors the SDK throws. A JSON-RPC error from the gateway becomes the `AxpError` subclass
 * of its code (`CapabilityDenied` for -32002, `UnknownTool` for -32004, ...), carrying the
 * error's `data` and in particular `data.reason`, the gateway's explanation. Failures of the
 * transport itself (nothing listens, a body that is not JSON-RPC, a stream that keeps breaking)
 * are `TransportError`, never an `AxpError`, so callers can tell "the gateway said no" from "the
 * gateway could not be heard".
 * @module
 */

/** The base of everything this SDK throws on purpose. */
export class AxpSdkError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = new.target.name;
  }
}

/** The request could not be sent, or its answer could not be read as JSON-RPC. */
export class TransportError extends AxpSdkError {
  readonly status: number | undefined;
  readonly body: string | undefined;

  constructor(message: string, opts: { status?: number; body?: string; cause?: unknown } = {}) {
    super(message, { cause: opts.cause });
    this.status = opts.status;
    this.body = opts.body;
  }
}

/** A job's event stream broke more times in a row than the client is willing to retry. */
export class ConnectionLost extends TransportError {}

/** The `error` member of a JSON-RPC response. */
export interface RpcErrorObject {
  code: number;
  message: string;
  data?: Record<string, unknown>;
}

/**
 * The gateway answered with a JSON-RPC error. `code` is its JSON-RPC code, `rpcName` the
 * gateway's name for it (`data.name`), `reason` its explanation (`data.reason`), `data` the
 * whole `data` object (`missing` for a denied grant, `limit` for a quota). Match on the class or
 * on `code`, never on the message text.
 */
export class AxpError extends AxpSdkError {
  /** The JSON-RPC code this class stands for (undefined on the base class). */
  static readonly CODE: number | undefined = undefined;
  readonly code: number;
  readonly rpcName: string | undefined;
  readonly reason: string | undefined;
  readonly data: Record<string, unknown>;
  readonly httpStatus: number | undefined;

  constructor(code: number, message: string, data?: Record<string, unknown>, httpStatus?: number) {
    super(message);
    this.code = code;
    this.data = data && typeof data === "object" ? data : {};
    this.rpcName = typeof this.data.name === "string" ? this.data.name : undefined;
    this.reason = typeof this.data.reason === "string" ? this.data.reason : undefined;
    this.httpStatus = httpStatus;
  }
}

export class ParseError extends AxpError {
  static override readonly CODE = -32700;
}
export class InvalidRequest extends AxpError {
  static override readonly CODE = -32600;
}
export class MethodNotFound extends AxpError {
  static override readonly CODE = -32601;
}
export class InvalidParams extends AxpError {
  static override readonly CODE = -32602;
}
export class InternalError extends AxpError {
  static override readonly CODE = -32603;
}
/** A missing, forged, expired or revoked credential. */
export class Unauthorized extends AxpError {
  static override readonly CODE = -32001;
}
/** The token does not grant what was asked; `data.missing` names the grant. */
export class CapabilityDenied extends AxpError {
  static override readonly CODE = -32002;
}
export class TierUnavailable extends AxpError {
  static override readonly CODE = -32003;
}
export class UnknownTool extends AxpError {
  static override readonly CODE = -32004;
}
export class UnknownJob extends AxpError {
  static override readonly CODE = -32005;
}
export class UnknownSession extends AxpError {
  static override readonly CODE = -32006;
}
/** A quota or size limit; `data.limit` names it. */
export class LimitExceeded extends AxpError {
  static override readonly CODE = -32007;
}
export class ProviderUnavailable extends AxpError {
  static override readonly CODE = -32008;
}
/** A call that needs an operator's approval was denied or cancelled. */
export class ApprovalRequired extends AxpError {
  static override readonly CODE = -32009;
}

const BY_CODE = new Map<number, typeof AxpError>(
  [
    ParseError,
    InvalidRequest,
    MethodNotFound,
    InvalidParams,
    InternalError,
    Unauthorized,
    CapabilityDenied,
    TierUnavailable,
    UnknownTool,
    UnknownJob,
    UnknownSession,
    LimitExceeded,
    ProviderUnavailable,
    ApprovalRequired,
  ].map((cls) => [cls.CODE as number, cls]),
);

/** The typed error for a JSON-RPC `error` object (an unknown code gives `AxpError`). */
export function errorFromRpc(error: unknown, httpStatus?: number): AxpError {
  const e = error as Partial<RpcErrorObject> | null;
  if (!e || typeof e !== "object" || typeof e.code !== "number") {
    return new AxpError(-32603, `malformed JSON-RPC error: ${JSON.stringify(error)}`, undefined, httpStatus);
  }
  const cls = BY_CODE.get(e.code) ?? AxpError;
  return new cls(e.code, String(e.message ?? ""), e.data, httpStatus);
}
