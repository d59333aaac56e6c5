"""Errors: one class per error code of PROTOCOL.md, section 5.

Programs branch on the class (or on ``.code``) and on ``.retryable``, never
on the message, which is text for people.

The codes, their retryable flags and their class names are those of
``_codes.py``, generated from the sidecar's own table (protocol/codes.go):
the classes below give each a docstring, and ``_bind_codes`` gives each its
code and flag, makes a plain class for a code this file does not know yet,
and lists every one in ``__all__``.
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Type

from ._codes import CODES


class QueensideError(Exception):
    """An error answered by the sidecar, or the loss of the connection to it."""

    code: str = "unknown"
    default_retryable: bool = False

    def __init__(
        self,
        message: str,
        *,
        code: Optional[str] = None,
        retryable: Optional[bool] = None,
        details: Optional[Mapping[str, Any]] = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        # The flag received wins over the table: PROTOCOL.md, section 8.
        self.retryable = self.default_retryable if retryable is None else bool(retryable)
        self.details: Dict[str, Any] = dict(details or {})

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"

    def __repr__(self) -> str:
        return f"{type(self).__name__}(code={self.code!r}, message={self.message!r}, retryable={self.retryable})"

    def to_wire(self) -> Dict[str, Any]:
        """The error object, with the keys in the protocol's order."""
        obj: Dict[str, Any] = {"code": self.code, "message": self.message, "retryable": self.retryable}
        if self.details:
            obj["details"] = self.details
        return obj


class BadRequestError(QueensideError):
    """The request envelope was malformed."""


class FrameTooLargeError(QueensideError):
    """A frame was empty or above maxFrameBytes; the sidecar then closes the connection."""


class UnknownOpError(QueensideError):
    """The operation name is not one of the protocol."""


class UnsupportedError(QueensideError):
    """The protocol version or feature is not served by this sidecar."""


class InvalidArgumentError(QueensideError):
    """An argument is missing, of the wrong type or out of range."""


class NotFoundError(QueensideError):
    """The queue, group, partition or DLQ entry does not exist."""


class ConflictError(QueensideError):
    """A transaction's ack items could not all succeed; nothing was committed."""

    @property
    def acks(self) -> List[Any]:
        """The per-item ack results (``AckItemResult``) from ``details.acks``."""
        from .results import AckItemResult  # results imports errors; import late

        return [AckItemResult.from_wire(r) for r in self.details.get("acks") or []]


class LeaseExpiredError(QueensideError):
    """The lease ended or belongs to someone else (a per-item code; listed for completeness)."""


class UnavailableError(QueensideError):
    """PostgreSQL cannot be reached (or its schema is not ready) and nothing could be spooled."""


class SpoolFullError(QueensideError):
    """PostgreSQL cannot be reached and the sidecar's spool is full."""


class DrainingError(QueensideError):
    """The sidecar is shutting down; send the request to another one."""


class OverloadedError(QueensideError):
    """A limit was reached (usually the frame size); ask for less."""


class DeadlineExceededError(QueensideError):
    """The request's time ran out; it may still have taken effect."""


class UnauthorizedError(QueensideError):
    """The sidecar does not serve this process's user id; the connection is closed."""


class InternalError(QueensideError):
    """An unexpected failure inside the sidecar."""


class KeyMissingError(QueensideError):
    """A message of an encrypted queue needs a key this sidecar was not given."""


class PermissionDeniedError(QueensideError):
    """The sidecar's database role lacks a privilege the call needs; retrying cannot help until it is granted."""


class ForbiddenError(QueensideError):
    """The sidecar's database role was not granted the right the call needs on its queue (queenside grant)."""


class ConnectionClosedError(QueensideError, ConnectionError):
    """The connection to the sidecar is gone (or could not be opened).

    ``code`` is ``"connection_closed"``, a client-side code that never comes
    from the sidecar. A request in flight when the connection broke may or
    may not have taken effect, which is why pushes that are retried should
    carry a ``transaction_id``.
    """

    code = "connection_closed"
    default_retryable = True


def _bind_codes() -> Dict[str, Type[QueensideError]]:
    classes: Dict[str, Type[QueensideError]] = {}
    for code, retryable, name in CODES:
        cls = globals().get(name)
        if cls is None:
            # A code newer than this file still gets its class.
            cls = type(name, (QueensideError,), {"__doc__": f"The sidecar answered ``{code}``.", "__module__": __name__})
            globals()[name] = cls
        cls.code = code
        cls.default_retryable = retryable
        classes[code] = cls
    return classes


ERROR_CLASSES: Dict[str, Type[QueensideError]] = _bind_codes()

__all__ = [
    "QueensideError",
    *(name for _code, _retryable, name in CODES),
    "ConnectionClosedError",
    "error_from_wire",
    "ERROR_CLASSES",
]


def error_from_wire(obj: Any) -> QueensideError:
    """The exception for an error object ``{code, message, retryable, details?}``."""
    if not isinstance(obj, dict):
        return InternalError(f"malformed error object: {obj!r}", retryable=False)
    code = str(obj.get("code") or "unknown")
    cls = ERROR_CLASSES.get(code, QueensideError)
    retryable = obj.get("retryable")
    # An unknown code is not retryable unless the sidecar says so (section 8).
    return cls(
        str(obj.get("message", "")),
        code=code,
        retryable=bool(retryable) if retryable is not None else None,
        details=obj.get("details") if isinstance(obj.get("details"), dict) else None,
    )
