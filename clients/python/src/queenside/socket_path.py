"""Where the sidecar's socket is, when the caller does not say."""

from __future__ import annotations

import os

__all__ = ["DEFAULT_SOCKET", "DEV_SOCKET", "default_socket_path"]

# Where a sidecar listens unless told otherwise.
DEFAULT_SOCKET = "/var/run/queenside/queenside.sock"
# Where `queenside dev` (`make run`) serves, relative to the directory it runs in.
DEV_SOCKET = ".queenside/queenside.sock"


def default_socket_path() -> str:
    """``QUEENSIDE_SOCKET`` when set, else ``DEV_SOCKET`` when it exists, else ``DEFAULT_SOCKET``.

    The same order as the Go client's SocketPath and the CLI, so a program
    started beside ``make run`` finds that sidecar without configuration.
    """
    env = os.environ.get("QUEENSIDE_SOCKET")
    if env:
        return env
    if os.path.exists(DEV_SOCKET):
        return DEV_SOCKET
    return DEFAULT_SOCKET
