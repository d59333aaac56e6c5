"""One socket to the sidecar for asyncio: the counterpart of ``connection``.

Any number of tasks send at once. Frames are cut out of the byte stream as
it arrives (an ``asyncio.Protocol``), and each answer resolves the future
registered under its id.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
from typing import Any, Callable, Dict, Optional

from .connection import DEFAULT_MAX_IN_FLIGHT, HELLO_ARGS, NoticeHandler, needs_limit, request_frame, unaddressed_frame
from .envelope import Request, Response
from .errors import (
    ConnectionClosedError,
    DeadlineExceededError,
    DrainingError,
    QueensideError,
    UnauthorizedError,
    error_from_wire,
)
from .framing import HEADER_SIZE, body_length

__all__ = ["AsyncConnection"]

log = logging.getLogger("queenside")

_ANSWER_MARGIN = 2.0


class _FrameProtocol(asyncio.Protocol):
    """Splits the incoming bytes into frame bodies; tracks write flow control."""

    def __init__(self, on_body: Callable[[bytes], None], on_lost: Callable[[Optional[Exception]], None]) -> None:
        self._on_body = on_body
        self._on_lost = on_lost
        self._buffer = bytearray()
        self.transport: Optional[asyncio.Transport] = None
        self.writable = asyncio.Event()
        self.writable.set()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        buf = self._buffer
        buf += data
        while len(buf) >= HEADER_SIZE:
            size = body_length(bytes(buf[:HEADER_SIZE]))
            if len(buf) < HEADER_SIZE + size:
                break
            body = bytes(buf[HEADER_SIZE : HEADER_SIZE + size])
            del buf[: HEADER_SIZE + size]
            self._on_body(body)

    def connection_lost(self, exc: Optional[Exception]) -> None:
        if exc is not None:
            self._read_what_is_left()
        self.writable.set()  # wake writers: they find the connection closed
        self._on_lost(exc)

    def _read_what_is_left(self) -> None:
        # A failed write (the sidecar closed after an id-0 frame_too_large
        # or unauthorized) makes asyncio stop reading at once; the frame
        # saying why may still wait in the socket, which is open until this
        # method returns.
        sock = self.transport.get_extra_info("socket") if self.transport else None
        if sock is None:
            return
        while True:
            try:
                chunk = os.read(sock.fileno(), 65536)
            except OSError:
                return
            if not chunk:
                return
            self.data_received(chunk)

    def pause_writing(self) -> None:
        self.writable.clear()

    def resume_writing(self) -> None:
        self.writable.set()


class AsyncConnection:
    def __init__(self, path: str, *, max_in_flight: int = DEFAULT_MAX_IN_FLIGHT, on_notice: Optional[NoticeHandler] = None) -> None:
        self.path = path
        self._ids = itertools.count(1)
        self._pending: Dict[int, "asyncio.Future[Response]"] = {}
        self._slots = asyncio.Semaphore(max_in_flight)
        self._closed: Optional[QueensideError] = None
        # Set by an id-0 frame_too_large or unauthorized, reported when the
        # connection then ends.
        self._fatal: Optional[QueensideError] = None
        self._on_notice = on_notice
        self._lost = asyncio.Event()
        self.draining = asyncio.Event()
        # Set by the sidecar's drain notice only (draining is also set by a
        # draining answer): after it, no call on this connection is retried.
        self.drain_announced = False
        self.max_frame_bytes: Optional[int] = None
        self._protocol = _FrameProtocol(self._on_body, self._on_lost)

    @classmethod
    async def open(
        cls,
        path: str,
        *,
        connect_timeout: Optional[float] = 5.0,
        max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
        on_notice: Optional[NoticeHandler] = None,
    ) -> "AsyncConnection":
        conn = cls(path, max_in_flight=max_in_flight, on_notice=on_notice)
        loop = asyncio.get_running_loop()
        try:
            await asyncio.wait_for(loop.create_unix_connection(lambda: conn._protocol, path), timeout=connect_timeout)
        except (OSError, asyncio.TimeoutError) as exc:
            raise ConnectionClosedError(f"connect to {path}: {exc or 'timed out'}") from exc
        return conn

    @property
    def closed(self) -> bool:
        return self._closed is not None

    async def request(
        self,
        op: str,
        args: Optional[Dict[str, Any]],
        *,
        timeout: Optional[float],
        wait_seconds: float = 0.0,
    ) -> Dict[str, Any]:
        """Send one request and wait for its result; raise its error (see ``Connection.request``)."""
        self._raise_if_closed()
        budget = None if timeout is None else timeout + wait_seconds
        if needs_limit(op, args, self.max_frame_bytes):
            hello = await self.request("hello", HELLO_ARGS, timeout=timeout)
            self.max_frame_bytes = hello.get("maxFrameBytes") or None
        ident = next(self._ids)
        data = request_frame(Request(ident, op, args, None if budget is None else max(1, int(budget * 1000))), self.max_frame_bytes)
        await self._slots.acquire()
        future: "asyncio.Future[Response]" = asyncio.get_running_loop().create_future()
        try:
            self._raise_if_closed()
            self._pending[ident] = future
            transport = self._protocol.transport
            assert transport is not None
            # One write call per frame: frames of concurrent tasks never interleave.
            transport.write(data)
            await self._protocol.writable.wait()
            try:
                # shield: a local timeout must not cancel the future the
                # protocol may still resolve when a late answer comes.
                response = await asyncio.wait_for(asyncio.shield(future), None if budget is None else budget + _ANSWER_MARGIN)
            except asyncio.TimeoutError:
                raise DeadlineExceededError(f"{op}: no answer within {budget:.1f}s", details={"local": True}) from None
        finally:
            # A late answer to an abandoned request finds no entry and is dropped.
            self._pending.pop(ident, None)
            self._slots.release()
        if response.error is not None:
            err = error_from_wire(response.error)
            if isinstance(err, DrainingError):
                # The notice may still be on its way behind this answer.
                self.draining.set()
            raise err
        return response.result if response.result is not None else {}

    def _announce_drain(self) -> None:
        self.drain_announced = True
        self.draining.set()

    def _raise_if_closed(self) -> None:
        if isinstance(self._closed, UnauthorizedError):
            # Refused before anything was read: every call would be, so say so.
            raise UnauthorizedError(self._closed.message) from self._closed
        if self._closed is not None:
            raise ConnectionClosedError(f"connection to {self.path} is closed: {self._closed.message}") from self._closed

    def _on_body(self, body: bytes) -> None:
        try:
            response = Response.decode(body)
        except ValueError as exc:
            self._shut(ConnectionClosedError(f"malformed answer from the sidecar: {exc}"))
            return
        if response.id == 0:
            self._fatal = unaddressed_frame(response, self._announce_drain, self._on_notice) or self._fatal
            return
        future = self._pending.pop(response.id, None)
        if future is not None and not future.done():
            future.set_result(response)

    def _on_lost(self, exc: Optional[Exception]) -> None:
        if self._fatal is not None:
            reason: QueensideError = self._fatal
        elif exc is not None:
            reason = ConnectionClosedError(f"connection to {self.path} lost: {exc}")
        else:
            reason = ConnectionClosedError("connection closed by the sidecar")
        self._shut(reason)
        self._lost.set()

    def _shut(self, reason: QueensideError) -> None:
        if self._closed is None:
            self._closed = reason
        pending = list(self._pending.values())
        self._pending.clear()
        for future in pending:
            if not future.done():
                future.set_exception(reason)
        if self._protocol.transport is not None:
            self._protocol.transport.close()

    async def close(self) -> None:
        """Close the socket; calls still waiting fail with ConnectionClosedError."""
        self._shut(ConnectionClosedError("client closed"))
        if self._protocol.transport is not None:
            try:
                await asyncio.wait_for(self._lost.wait(), timeout=5)
            except asyncio.TimeoutError:
                pass
