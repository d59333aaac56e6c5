"""Envelopes: the map every frame body holds (PROTOCOL.md, section 2)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Optional

from .codec import packb, unpack_body

__all__ = ["Request", "Response", "NOTICE_DRAINING"]

NOTICE_DRAINING = "draining"


@dataclass
class Request:
    """``{id, op, args?, timeoutMs?}``, written in that key order."""

    id: int
    op: str
    args: Optional[Dict[str, Any]] = None
    timeout_ms: Optional[int] = None

    def encode(self) -> bytes:
        env: Dict[str, Any] = {"id": self.id, "op": self.op}
        if self.args is not None:
            env["args"] = self.args
        if self.timeout_ms:
            env["timeoutMs"] = self.timeout_ms
        return packb(env)

    @classmethod
    def decode(cls, body: bytes) -> "Request":
        env = _envelope(body)
        return cls(
            id=env.get("id", 0),
            op=env.get("op", ""),
            args=env.get("args"),
            timeout_ms=env.get("timeoutMs"),
        )


@dataclass
class Response:
    """``{id, result}``, ``{id, error}`` or, with id 0, ``{id, notice}``."""

    id: int
    result: Optional[Dict[str, Any]] = None
    error: Optional[Dict[str, Any]] = None
    notice: Optional[str] = None

    @property
    def is_notice(self) -> bool:
        return self.notice is not None

    def encode(self) -> bytes:
        env: Dict[str, Any] = {"id": self.id}
        if self.result is not None:
            env["result"] = self.result
        if self.error is not None:
            env["error"] = self.error
        if self.notice is not None:
            env["notice"] = self.notice
        return packb(env)

    @classmethod
    def decode(cls, body: bytes) -> "Response":
        env = _envelope(body)
        ident = env.get("id", 0)
        if not isinstance(ident, int):
            raise ValueError(f"response id is {type(ident).__name__}, not an integer")
        return cls(
            id=ident,
            result=env.get("result"),
            error=env.get("error"),
            notice=env.get("notice"),
        )


def _envelope(body: bytes) -> Dict[str, Any]:
    env = unpack_body(body)
    if not isinstance(env, dict):
        raise ValueError(f"a frame body must be a map, not {type(env).__name__}")
    return env
