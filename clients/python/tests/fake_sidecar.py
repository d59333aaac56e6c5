"""A stand-in sidecar that answers from a script, for what a real one gives
only in an outage or a shutdown: ``unavailable`` and ``draining`` on demand.

It serves one connection on a Unix socket, speaks the framed protocol
(4-byte big-endian length, one msgpack map), answers each request in
arrival order with the frames ``script(n, request)`` returns, and keeps the
requests for the test to count.
"""

from __future__ import annotations

import os
import socket
import struct
import tempfile
import threading
from typing import Any, Callable, Dict, List, Optional

import msgpack

Frame = Dict[str, Any]
Script = Callable[[int, Frame], List[Frame]]


def error(req: Frame, code: str, retryable: bool = True) -> Frame:
    return {"id": req["id"], "error": {"code": code, "message": f"scripted {code}", "retryable": retryable}}


def result(req: Frame, value: Optional[Dict[str, Any]] = None) -> Frame:
    return {"id": req["id"], "result": value if value is not None else {}}


DRAINING_NOTICE: Frame = {"id": 0, "notice": "draining"}


def fail_first(n: int, code: str) -> Script:
    """Answers ``code`` to the first n requests, then an empty result."""

    def script(i: int, req: Frame) -> List[Frame]:
        return [error(req, code)] if i <= n else [result(req)]

    return script


class FakeSidecar:
    def __init__(self, script: Script) -> None:
        self._dir = tempfile.mkdtemp(prefix="qs-fake-")
        self.socket = os.path.join(self._dir, "s.sock")
        self._script = script
        self.requests: List[Frame] = []
        self._lock = threading.Lock()
        self._server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._server.bind(self.socket)
        self._server.listen(1)
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def __enter__(self) -> "FakeSidecar":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def ops(self) -> List[str]:
        with self._lock:
            return [r["op"] for r in self.requests]

    def _serve(self) -> None:
        try:
            conn, _ = self._server.accept()
        except OSError:
            return
        with conn:
            stream = conn.makefile("rb")
            while True:
                head = stream.read(4)
                if len(head) < 4:
                    return
                (size,) = struct.unpack(">I", head)
                req = msgpack.unpackb(stream.read(size), raw=False)
                with self._lock:
                    self.requests.append(req)
                    n = len(self.requests)
                try:
                    for frame in self._script(n, req):
                        body = msgpack.packb(frame, use_bin_type=True)
                        conn.sendall(struct.pack(">I", len(body)) + body)
                except OSError:
                    return

    def close(self) -> None:
        self._server.close()
        try:
            os.unlink(self.socket)
            os.rmdir(self._dir)
        except OSError:
            pass
