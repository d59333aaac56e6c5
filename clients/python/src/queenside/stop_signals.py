"""SIGINT and SIGTERM as a request to stop consuming.

The first signal asks the loop to stop cleanly (finish the message in hand,
ack, release the rest); the previous handlers are put back at once, so a
second Ctrl-C interrupts as it normally would.
"""

from __future__ import annotations

import asyncio
import signal
import threading
from typing import Any, Callable, Dict, List, Optional

__all__ = ["STOP_SIGNALS", "install_stop_signals"]

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def install_stop_signals(stop: Callable[[], None], loop: Optional[asyncio.AbstractEventLoop] = None) -> Callable[[], None]:
    """Route SIGINT/SIGTERM to stop; return a function that restores the old handlers.

    With ``loop``, the handlers are the event loop's (``add_signal_handler``).
    Signal handlers can only be set from the main thread; elsewhere this
    does nothing and the caller stops the loop itself.
    """
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    previous: Dict[int, Any] = {}
    installed: List[int] = []

    def restore() -> None:
        while installed:
            sig = installed.pop()
            if loop is not None:
                loop.remove_signal_handler(sig)
            # remove_signal_handler leaves SIG_DFL behind: put back what was
            # there (Python's own Ctrl-C handling, say). None: a handler set
            # outside Python, which cannot be put back; the default then.
            signal.signal(sig, signal.SIG_DFL if previous[sig] is None else previous[sig])

    def on_signal(*_args: Any) -> None:
        restore()
        stop()

    for sig in STOP_SIGNALS:
        previous[sig] = signal.getsignal(sig)
        try:
            if loop is not None:
                loop.add_signal_handler(sig, on_signal)
            else:
                signal.signal(sig, on_signal)
        except (NotImplementedError, RuntimeError, ValueError):
            continue
        installed.append(sig)
    return restore
