"""Where the stand-in's tracer puts ended spans (the part an SDK exporter plays)."""

from __future__ import annotations

import threading
from typing import Any, List

_lock = threading.Lock()
_finished: List[Any] = []


def export(span: Any) -> None:
    with _lock:
        _finished.append(span)


def finished_spans() -> List[Any]:
    with _lock:
        return list(_finished)


def clear() -> None:
    with _lock:
        _finished.clear()
