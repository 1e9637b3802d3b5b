"""One exception class per API error code. Every error the server answers
becomes the class of its code, carrying the message, the details and the
HTTP status."""

from __future__ import annotations

from typing import Any, Dict, Optional, Type


class CoveError(Exception):
    """An error answered by the cove API (or met on the way to it). ``code``
    is the API's error code, ``status`` the HTTP status (None when no answer
    came: a transport failure is Unavailable with no status), ``details``
    the answer's details."""

    code: str = "unknown"

    def __init__(self, message: str, details: Optional[Dict[str, Any]] = None, status: Optional[int] = None) -> None:
        super().__init__(message)
        self.message = message
        self.details: Dict[str, Any] = details or {}
        self.status = status
        self.request_id = ""

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"


class InvalidArgument(CoveError):
    code = "invalid_argument"


class Unauthenticated(CoveError):
    code = "unauthenticated"


class PermissionDenied(CoveError):
    code = "permission_denied"


class NotFound(CoveError):
    code = "not_found"


class Conflict(CoveError):
    code = "conflict"


class PreconditionFailed(CoveError):
    """A write's expected version no longer matches: read the file again."""

    code = "precondition_failed"


class PayloadTooLarge(CoveError):
    code = "payload_too_large"


class Unprocessable(CoveError):
    code = "unprocessable"


class ResourceExhausted(CoveError):
    code = "resource_exhausted"


class BudgetExceeded(CoveError):
    code = "budget_exceeded"


class Internal(CoveError):
    code = "internal"


class Unavailable(CoveError):
    """The server is busy or down (503), or could not be reached at all
    (then ``status`` is None): retried where the call is safe to repeat."""

    code = "unavailable"


class InsufficientStorage(CoveError):
    """No room for the write (507): the sandbox's disk, or the node's data
    disk (the message names which), is full; nothing of the call was kept."""

    code = "insufficient_storage"


class DigestMismatch(CoveError):
    """Downloaded bytes do not match the sha-256 the server announced."""

    code = "digest_mismatch"


ERRORS: Dict[str, Type[CoveError]] = {
    c.code: c
    for c in (
        InvalidArgument, Unauthenticated, PermissionDenied, NotFound, Conflict, PreconditionFailed,
        PayloadTooLarge, Unprocessable, ResourceExhausted, BudgetExceeded, Internal, Unavailable,
        InsufficientStorage,
    )
}

_BY_STATUS = {
    400: InvalidArgument, 401: Unauthenticated, 402: BudgetExceeded, 403: PermissionDenied, 404: NotFound,
    409: Conflict, 412: PreconditionFailed, 413: PayloadTooLarge, 422: Unprocessable, 429: ResourceExhausted,
    503: Unavailable, 507: InsufficientStorage,
}


def error_from(status: int, body: bytes, request_id: str = "") -> CoveError:
    """The exception for an error answer."""
    err = _error_from(status, body)
    err.request_id = request_id
    return err


def _error_from(status: int, body: bytes) -> CoveError:
    import json

    try:
        e = json.loads(body)["error"]
        cls = ERRORS.get(e.get("code", ""), CoveError)
        err = cls(e.get("message", ""), e.get("details"), status)
        if cls is CoveError:
            err.code = e.get("code", "unknown")
        return err
    except (ValueError, KeyError, TypeError, AttributeError):
        cls = _BY_STATUS.get(status, Internal)
        text = body.decode("utf-8", "replace").strip() or f"HTTP {status}"
        return cls(text, None, status)
