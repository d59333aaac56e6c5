"""SIGINT and SIGTERM as a request to stop consuming.

The first signal asks the loop to stop cleanly (finish the message in hand,
ack, release the rest); the previous handler is put back at once, so a
second Ctrl-C interrupts as it normally would.
"""

from __future__ import annotations

import signal
import threading
from typing import Any, Callable, Dict

__all__ = ["STOP_SIGNALS", "install_stop_signals"]

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def install_stop_signals(stop: Callable[[], None]) -> Callable[[], None]:
    """Route SIGINT/SIGTERM to stop; return a function that restores the old handlers.

    Signal handlers can only be set from the main thread; elsewhere this
    does nothing and the caller stops the loop itself.
    """
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    previous: Dict[int, Any] = {}

    def on_signal(signum: int, _frame: Any) -> None:
        signal.signal(signum, previous[signum])
        stop()

    for sig in STOP_SIGNALS:
        previous[sig] = signal.signal(sig, on_signal)

    def restore() -> None:
        for sig, handler in previous.items():
            signal.signal(sig, handler)

    return restore
