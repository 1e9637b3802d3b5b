// One Error subclass per API error code. Every failure of a call is a
// CoveError: an error the server answers becomes the class of its code,
// carrying the message, the details, the HTTP status and the request ID; a
// failure to reach the server at all (refused, reset, cut) is Unavailable
// with status 0; a call given up by its signal or its timeout is Cancelled
// or DeadlineExceeded.

/** The base of every error the SDK throws. */
export class CoveError extends Error {
  /** The API's error code ("not_found", …). */
  code: string = "unknown";
  /** details from the error answer ({} when none). */
  details: Record<string, unknown>;
  /** The HTTP status (0 when the error did not come from an answer). */
  status: number;
  /** The ID of the request that failed (the X-Request-Id the SDK sent, or
   * the server's when it answered one); "" when there was no request. */
  requestId: string = "";

  /** An error with the message, the details and status of its answer
   * (0 when none), and the failure that caused it. */
  constructor(message: string, details?: Record<string, unknown> | null, status = 0, options?: { cause?: unknown }) {
    super(message, options);
    this.name = new.target.name;
    this.details = details ?? {};
    this.status = status;
  }

  override toString(): string {
    return `${this.code}: ${this.message}`;
  }
}

/** A request the API refuses as malformed (400). */
export class InvalidArgument extends CoveError { override code = "invalid_argument"; }
/** No key, or one the server does not know (401). */
export class Unauthenticated extends CoveError { override code = "unauthenticated"; }
/** The key may not do this (403). */
export class PermissionDenied extends CoveError { override code = "permission_denied"; }
/** No such resource for this team (404). */
export class NotFound extends CoveError { override code = "not_found"; }
/** The resource's state forbids it now (409). */
export class Conflict extends CoveError { override code = "conflict"; }
/** A write's expected version no longer matches: read the file again. */
export class PreconditionFailed extends CoveError { override code = "precondition_failed"; }
/** A body over the limit (413). */
export class PayloadTooLarge extends CoveError { override code = "payload_too_large"; }
/** Well formed but not doable, e.g. a reused Idempotency-Key (422). */
export class Unprocessable extends CoveError { override code = "unprocessable"; }
/** A limit or quota reached (429); retried after Retry-After. */
export class ResourceExhausted extends CoveError { override code = "resource_exhausted"; }
/** A spend limit reached (402). */
export class BudgetExceeded extends CoveError { override code = "budget_exceeded"; }
/** The server's own failure (500). */
export class Internal extends CoveError { override code = "internal"; }
/** The server cannot answer now (503), or could not be reached at all
 * (status 0): retried where the call may be. */
export class Unavailable extends CoveError { override code = "unavailable"; }
/** No room left for the write (507): the sandbox's disk, or the node's
 * data disk (the message names which), is full; nothing was kept. */
export class InsufficientStorage extends CoveError { override code = "insufficient_storage"; }
/** The call was given up because its AbortSignal fired. */
export class Cancelled extends CoveError { override code = "cancelled"; }
/** The call took longer than its timeout (timeoutMs). */
export class DeadlineExceeded extends CoveError { override code = "deadline_exceeded"; }
/** Downloaded bytes do not match the sha-256 the server announced. */
export class DigestMismatch extends CoveError { override code = "digest_mismatch"; }

type ErrorClass = new (message: string, details?: Record<string, unknown> | null, status?: number) => CoveError;

/** The class of each API error code. */
export const ERRORS: Record<string, ErrorClass> = {
  invalid_argument: InvalidArgument,
  unauthenticated: Unauthenticated,
  permission_denied: PermissionDenied,
  not_found: NotFound,
  conflict: Conflict,
  precondition_failed: PreconditionFailed,
  payload_too_large: PayloadTooLarge,
  unprocessable: Unprocessable,
  resource_exhausted: ResourceExhausted,
  budget_exceeded: BudgetExceeded,
  internal: Internal,
  unavailable: Unavailable,
  insufficient_storage: InsufficientStorage,
};

const BY_STATUS: Record<number, ErrorClass> = {
  400: InvalidArgument, 401: Unauthenticated, 402: BudgetExceeded, 403: PermissionDenied, 404: NotFound,
  409: Conflict, 412: PreconditionFailed, 413: PayloadTooLarge, 422: Unprocessable, 429: ResourceExhausted,
  503: Unavailable, 507: InsufficientStorage,
};

/** The error for an error answer: its status, body text and request ID. */
export function errorFrom(status: number, body: string, requestId = ""): CoveError {
  const err = decodeError(status, body);
  err.requestId = requestId;
  return err;
}

function decodeError(status: number, body: string): CoveError {
  try {
    const e = JSON.parse(body).error;
    if (e && typeof e === "object") {
      const cls = ERRORS[e.code ?? ""];
      if (cls) return new cls(e.message ?? "", e.details, status);
      const err = new CoveError(e.message ?? "", e.details, status);
      err.code = e.code ?? "unknown";
      return err;
    }
  } catch {
    // not JSON: fall through
  }
  const cls = BY_STATUS[status] ?? Internal;
  return new cls(body.trim() || `HTTP ${status}`, null, status);
}

/** A failure to reach the server (no answer): Unavailable with status 0,
 * the underlying error as its cause. */
export function transportError(cause: unknown, what: string, requestId = ""): Unavailable {
  const why = cause instanceof Error ? (cause.cause instanceof Error ? cause.cause.message : cause.message) : String(cause);
  const err = new Unavailable(`${what}: ${why}`, null, 0, { cause });
  err.requestId = requestId;
  return err;
}
