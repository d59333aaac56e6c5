"""Builds the sidecar once and runs real ones for the tests.

``queenside dev`` starts a throwaway PostgreSQL of its own; every path it
uses (socket, spool, cluster) is put under the test's directory so that a
developer's ``make run`` in the same tree is never touched.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence

REPO = Path(__file__).resolve().parents[3]

# Build attempts, and the pause between them: a build can fail while someone
# is half-way through an edit elsewhere in the tree.
_BUILD_ATTEMPTS = 1 if os.environ.get("CI") else 3
_BUILD_RETRY_PAUSE = 60.0


def build_sidecar(out_dir: Path) -> Path:
    """The sidecar binary: ``QUEENSIDE_TEST_BIN`` when set, else a fresh build."""
    prebuilt = os.environ.get("QUEENSIDE_TEST_BIN")
    if prebuilt:
        return Path(prebuilt).resolve()
    binary = out_dir / "queenside"
    last = ""
    for attempt in range(_BUILD_ATTEMPTS):
        proc = subprocess.run(
            ["go", "build", "-o", str(binary), "./sidecar/cmd/queenside"],
            cwd=REPO,
            capture_output=True,
            text=True,
            env=_go_env(),
        )
        if proc.returncode == 0:
            return binary
        last = proc.stderr
        if attempt + 1 < _BUILD_ATTEMPTS:
            time.sleep(_BUILD_RETRY_PAUSE)
    raise RuntimeError(f"go build ./sidecar/cmd/queenside failed:\n{last}")


def _go_env() -> Dict[str, str]:
    env = dict(os.environ)
    if os.path.isdir("/usr/local/go/bin"):
        env["PATH"] = env.get("PATH", "") + os.pathsep + "/usr/local/go/bin"
    return env


def sidecar_env() -> Dict[str, str]:
    """The environment without QUEENSIDE_* settings, which would override the flags' defaults."""
    return {k: v for k, v in os.environ.items() if not k.startswith("QUEENSIDE_")}


class Sidecar:
    """One ``queenside dev`` process serving ``<workdir>/queenside.sock``."""

    def __init__(self, binary: Path, workdir: Path, extra_args: Sequence[str] = ()) -> None:
        self.binary = binary
        self.workdir = workdir
        self.socket = str(workdir / "queenside.sock")
        self.extra_args = list(extra_args)
        self.proc: "Optional[subprocess.Popen[bytes]]" = None
        self.log_path = workdir / "sidecar.log"

    def args(self) -> List[str]:
        return [
            str(self.binary),
            "dev",
            "--dir",
            str(self.workdir / "pg"),
            "--socket",
            self.socket,
            "--spool-dir",
            str(self.workdir / "spool"),
            "--log-level",
            "warn",
            *self.extra_args,
        ]

    def start(self, wait_healthy: bool = True, timeout: float = 90.0) -> "Sidecar":
        self.workdir.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            self.args(), cwd=self.workdir, env=sidecar_env(), stdout=log, stderr=subprocess.STDOUT
        )
        log.close()
        if wait_healthy:
            self.wait_healthy(timeout)
        else:
            self.wait_socket(timeout)
        return self

    def wait_healthy(self, timeout: float) -> None:
        """Until ``queenside health`` exits 0: the database answers and the schema is migrated."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self._check_alive()
            probe = subprocess.run(
                [str(self.binary), "health", "--socket", self.socket],
                capture_output=True,
                env=sidecar_env(),
            )
            if probe.returncode == 0:
                return
            time.sleep(0.1)
        raise TimeoutError(f"sidecar not healthy after {timeout}s; log:\n{self.log()}")

    def wait_socket(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not os.path.exists(self.socket):
            self._check_alive()
            if time.monotonic() > deadline:
                raise TimeoutError(f"sidecar socket missing after {timeout}s; log:\n{self.log()}")
            time.sleep(0.05)

    def _check_alive(self) -> None:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise RuntimeError(f"sidecar exited with {self.proc.returncode}; log:\n{self.log()}")

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)

    def stop(self, timeout: float = 30.0) -> Optional[int]:
        """SIGINT (a clean drain, which also stops its PostgreSQL), then SIGKILL if it hangs."""
        if self.proc is None or self.proc.poll() is not None:
            return None if self.proc is None else self.proc.returncode
        self.proc.send_signal(signal.SIGINT)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait(10)

    def database_url(self) -> str:
        """The URL of the sidecar's database, as its start-up banner prints it
        (``database: postgres://...``): an application connects there to call
        the SQL API in its own transactions."""
        deadline = time.monotonic() + 10
        while True:
            text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
            found = re.findall(r"^\s*database:\s+(postgres\S+)", text, re.M)
            if found:
                return str(found[-1])
            if time.monotonic() > deadline:
                raise RuntimeError(f"the sidecar printed no database URL; log:\n{self.log()}")
            time.sleep(0.05)

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-4000:]
        except OSError:
            return ""
