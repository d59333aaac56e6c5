"""opentelemetry.context: immutable contexts, the current one kept in a contextvar."""

from __future__ import annotations

import contextvars
import uuid
from typing import Any, Optional

__all__ = ["Context", "create_key", "get_value", "set_value", "get_current", "attach", "detach"]


class Context(dict):  # type: ignore[type-arg]
    def __setitem__(self, key: str, value: Any) -> None:
        raise ValueError("a Context is immutable")


_CURRENT: "contextvars.ContextVar[Context]" = contextvars.ContextVar("current_context", default=Context())


def create_key(keyname: str) -> str:
    return f"{keyname}-{uuid.uuid4()}"


def get_value(key: str, context: Optional[Context] = None) -> Any:
    return (context if context is not None else get_current()).get(key)


def set_value(key: str, value: Any, context: Optional[Context] = None) -> Context:
    new_values = dict(context if context is not None else get_current())
    new_values[key] = value
    return Context(new_values)


def get_current() -> Context:
    return _CURRENT.get()


def attach(context: Context) -> "contextvars.Token[Context]":
    return _CURRENT.set(context)


def detach(token: "contextvars.Token[Context]") -> None:
    # The real API logs a failed detach rather than raising; the stand-in
    # raises, so that a test sees a context detached out of order.
    _CURRENT.reset(token)
