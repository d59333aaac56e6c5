"""One socket to the sidecar, shared by many threads.

Requests are pipelined: any thread writes its frame (under a lock, so frames
never interleave) and waits on a future, while one reader thread hands each
answer to the future registered under its id. Answers come in whatever order
the sidecar finishes them.
"""

from __future__ import annotations

import itertools
import logging
import socket
import threading
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, Callable, Dict, Optional

from .envelope import NOTICE_DRAINING, Request, Response
from .errors import (
    ConnectionClosedError,
    DeadlineExceededError,
    DrainingError,
    FrameTooLargeError,
    QueensideError,
    UnauthorizedError,
    error_from_wire,
)
from .framing import MAX_BODY, frame, read_frame
from .version import CLIENT_NAME

__all__ = ["Connection", "DEFAULT_MAX_IN_FLIGHT", "request_frame", "unaddressed_frame"]

log = logging.getLogger("queenside")

# The sidecar serves at most 256 requests of one connection at once and then
# stops reading it; staying below keeps writes from blocking.
DEFAULT_MAX_IN_FLIGHT = 256
# Time allowed past a request's own deadline for the sidecar's answer to it
# (deadline_exceeded, or a long-poll's empty result) to arrive.
_ANSWER_MARGIN = 2.0

NoticeHandler = Callable[[str], None]


# A request above this size is held against the sidecar's frame limit,
# asked of hello first when not known yet; a smaller one fits any sidecar's
# limit but a tiny one, and costs no round trip (as in the Go and Node
# clients).
LEARN_LIMIT_ABOVE = 64 * 1024

HELLO_ARGS: Dict[str, Any] = {"protocol": 1, "client": CLIENT_NAME}


def needs_limit(op: str, args: Optional[Dict[str, Any]], max_frame_bytes: Optional[int]) -> bool:
    """Whether the sidecar's frame limit must be asked before sending op."""
    return max_frame_bytes is None and op != "hello" and len(Request(0, op, args, None).encode()) > LEARN_LIMIT_ABOVE


def request_frame(req: Request, max_frame_bytes: Optional[int]) -> bytes:
    """The frame of req, refused here when it is above the sidecar's known limit.

    Refusing it locally fails this one call; sending it would make the
    sidecar close the connection under every call in flight.
    """
    body = req.encode()
    limit = max_frame_bytes or MAX_BODY
    if len(body) > limit:
        raise FrameTooLargeError(
            f"{req.op}: a request of {len(body)} bytes is above the sidecar's frame limit of {limit} bytes "
            "(its --max-frame-bytes): send fewer items a request, or raise the limit",
            details={"local": True, "bytes": len(body), "maxFrameBytes": limit},
        )
    return frame(body)


def unaddressed_frame(
    response: Response, on_draining: Callable[[], None], on_notice: Optional[NoticeHandler]
) -> Optional[QueensideError]:
    """Handle an id-0 frame; return the error that ends the connection, if it is one."""
    if response.notice is not None:
        # The handler first, then the drain announced: whoever wakes on the
        # draining event has the notice delivered already.
        if on_notice is not None:
            try:
                on_notice(response.notice)
            except Exception:  # a callback's bug must not kill the reader
                log.exception("queenside: notice handler failed")
        if response.notice == NOTICE_DRAINING:
            on_draining()
        return None  # notices this client does not know are ignored
    if response.error is not None:
        err = error_from_wire(response.error)
        # Only these two end the connection; an id-0 bad_request concerns
        # one frame the sidecar could not attribute, and it carries on.
        if isinstance(err, (FrameTooLargeError, UnauthorizedError)):
            return err
        log.warning("queenside: sidecar reported an error with no request id: %s", err)
    return None


class Connection:
    def __init__(
        self,
        path: str,
        *,
        connect_timeout: Optional[float] = 5.0,
        max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
        on_notice: Optional[NoticeHandler] = None,
    ) -> None:
        self.path = path
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(connect_timeout)
            sock.connect(path)
            sock.settimeout(None)
        except OSError as exc:
            sock.close()
            raise ConnectionClosedError(f"connect to {path}: {exc}") from exc
        self._sock = sock
        self._stream = sock.makefile("rb", buffering=64 * 1024)
        self._ids = itertools.count(1)
        self._pending: Dict[int, "Future[Response]"] = {}
        self._lock = threading.Lock()
        self._send_lock = threading.Lock()
        self._slots = threading.BoundedSemaphore(max_in_flight)
        self._closed: Optional[QueensideError] = None
        self._on_notice = on_notice
        self.draining = threading.Event()
        # Set by the sidecar's drain notice only (draining is also set by a
        # draining answer): after it, no call on this connection is retried.
        self.drain_announced = False
        # Learnt from hello: lets an oversized request fail here, alone,
        # instead of making the sidecar close the connection.
        self.max_frame_bytes: Optional[int] = None
        self._reader = threading.Thread(target=self._read_loop, name=f"queenside-reader:{path}", daemon=True)
        self._reader.start()

    @property
    def closed(self) -> bool:
        return self._closed is not None

    def request(
        self,
        op: str,
        args: Optional[Dict[str, Any]],
        *,
        timeout: Optional[float],
        wait_seconds: float = 0.0,
    ) -> Dict[str, Any]:
        """Send one request and wait for its result; raise its error.

        ``timeout`` travels as timeoutMs (the sidecar's deadline); None means
        no deadline. ``wait_seconds`` is time the sidecar may rightly hold
        the request (a long-poll) on top of it.
        """
        budget = None if timeout is None else timeout + wait_seconds
        timeout_ms = None if budget is None else max(1, int(budget * 1000))
        if needs_limit(op, args, self.max_frame_bytes):
            hello = self.request("hello", HELLO_ARGS, timeout=timeout)
            self.max_frame_bytes = hello.get("maxFrameBytes") or None
        future = self._submit(op, args, timeout_ms)
        try:
            response: Response = future.result(None if budget is None else budget + _ANSWER_MARGIN)
        except FutureTimeout:
            # The entry stays registered: the sidecar still serves the
            # request and its late answer must free the slot it holds.
            raise DeadlineExceededError(f"{op}: no answer within {budget:.1f}s", details={"local": True}) from None
        if response.error is not None:
            err = error_from_wire(response.error)
            if isinstance(err, DrainingError):
                # The notice may still be on its way behind this answer.
                self.draining.set()
            raise err
        return response.result if response.result is not None else {}

    def _submit(self, op: str, args: Optional[Dict[str, Any]], timeout_ms: Optional[int]) -> "Future[Response]":
        future: "Future[Response]" = Future()
        with self._lock:
            self._raise_if_closed()
            ident = next(self._ids)
        data = request_frame(Request(ident, op, args, timeout_ms), self.max_frame_bytes)
        self._slots.acquire()
        with self._lock:
            if self._closed is not None:
                self._slots.release()
                self._raise_if_closed()
            # Registered before the write: the answer may come back before
            # sendall returns.
            self._pending[ident] = future
        try:
            with self._send_lock:
                self._sock.sendall(data)
        except OSError as exc:
            # The sidecar may have closed on purpose (frame_too_large, sent
            # before it stopped reading): let the reader take in that last
            # frame, so the caller learns why rather than just "broken pipe".
            if threading.current_thread() is not self._reader:
                self._reader.join(timeout=2)
            self._shut(ConnectionClosedError(f"send {op}: {exc}"))
            cause = future.exception() if future.done() else None
            if cause is not None:
                raise cause from exc
            raise ConnectionClosedError(f"send {op}: {exc}") from exc
        return future

    def _take(self, ident: int) -> Optional["Future[Response]"]:
        with self._lock:
            future = self._pending.pop(ident, None)
        if future is not None:
            self._slots.release()
        return future

    def _announce_drain(self) -> None:
        self.drain_announced = True
        self.draining.set()

    def _raise_if_closed(self) -> None:
        if isinstance(self._closed, UnauthorizedError):
            # Refused before anything was read: every call would be, so say so.
            raise UnauthorizedError(self._closed.message) from self._closed
        if self._closed is not None:
            raise ConnectionClosedError(f"connection to {self.path} is closed: {self._closed.message}") from self._closed

    def _read_loop(self) -> None:
        closed_by_sidecar = ConnectionClosedError("connection closed by the sidecar")
        fatal: QueensideError = closed_by_sidecar
        try:
            while True:
                body = read_frame(self._stream)
                if body is None:
                    break
                response = Response.decode(body)
                if response.id == 0:
                    fatal = unaddressed_frame(response, self._announce_drain, self._on_notice) or fatal
                    continue
                future = self._take(response.id)
                if future is not None and not future.done():
                    future.set_result(response)
        except (OSError, EOFError, ValueError) as exc:
            # A reset right after an id-0 frame_too_large is that error's
            # doing: keep the reason the sidecar gave.
            if self._closed is None and fatal is closed_by_sidecar:
                fatal = ConnectionClosedError(f"connection to {self.path} lost: {exc}")
        finally:
            self._shut(fatal)

    def _shut(self, reason: QueensideError) -> None:
        with self._lock:
            if self._closed is None:
                self._closed = reason
            pending = list(self._pending.items())
            self._pending.clear()
        for _ident, future in pending:
            self._slots.release()
            if not future.done():
                future.set_exception(reason)
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def close(self) -> None:
        """Close the socket; calls still waiting fail with ConnectionClosedError."""
        self._shut(ConnectionClosedError("client closed"))
        if threading.current_thread() is not self._reader:
            self._reader.join(timeout=5)
        self._stream.close()
        self._sock.close()
