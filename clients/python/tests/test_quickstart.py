"""The README's quick start, run as printed: the client installed with pip
from a copy of the checkout into a fresh virtual environment (offline, as
the README's Install says: --system-site-packages for msgpack and
setuptools, --no-deps --no-build-isolation), the README's programs saved as
they are in a fresh project, run against a sidecar of their own, and what
they print checked against what the README says they print."""

from __future__ import annotations

import os
import queue as _queue
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Dict, Iterator, List, Tuple

import pytest

from harness import REPO, Sidecar
from readme import printed_runs, programs, section

CLIENT = REPO / "clients" / "python"


@pytest.fixture(scope="module")
def venv_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtual environment with the client pip-installed from a copy
    of the checkout (so that the build leaves nothing in the tree)."""
    root = tmp_path_factory.mktemp("quickstart-venv")
    checkout = root / "queenside" / "clients" / "python"
    shutil.copytree(
        CLIENT, checkout, ignore=shutil.ignore_patterns("tests", "build", "*.egg-info", "__pycache__", ".pytest_cache")
    )
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True, capture_output=True)
    python = venv / "bin" / "python"
    pip = subprocess.run(
        [str(python), "-m", "pip", "install", "--no-deps", "--no-build-isolation", str(checkout)],
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert pip.returncode == 0, pip.stdout + pip.stderr
    return python


@pytest.fixture(scope="module")
def own_sidecar(sidecar_bin: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sidecar]:
    """A sidecar of the test's own: the quick start's queue is new there."""
    sc = Sidecar(sidecar_bin, tmp_path_factory.mktemp("quickstart-sidecar"))
    sc.start()
    try:
        yield sc
    finally:
        sc.stop()


def clean_env() -> Dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("QUEENSIDE_", "PYTHON"))}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


def test_the_quick_start_runs_as_printed(venv_python: Path, own_sidecar: Sidecar, tmp_path: Path) -> None:
    text = section("Quick start")
    project = tmp_path / "project"
    project.mkdir()
    for name, code in programs(text).items():
        (project / name).write_text(code)
    env = clean_env()
    env["QUEENSIDE_SOCKET"] = own_sidecar.socket  # the README's export
    env["PYTHONUNBUFFERED"] = "1"  # its lines as they are printed, through a pipe

    where = subprocess.run([str(venv_python), "-c", "import queenside; print(queenside.__file__)"],
                           cwd=project, env=env, capture_output=True, text=True, check=True)
    assert where.stdout.startswith(str(venv_python.parent.parent)), where.stdout  # the installed client, not the sources

    runs = printed_runs(text)
    assert [command for command, _ in runs] == ["python producer.py", "python producer.py", "python worker.py"]
    for command, printed in runs:
        program = command.split()[1]
        if not any(line.startswith("^C") for line in printed):
            done = subprocess.run([str(venv_python), program], cwd=project, env=env, capture_output=True, text=True, timeout=60)
            assert done.returncode == 0, done.stderr
            assert done.stdout.splitlines() == printed
            continue
        before = [line for line in printed if not line.startswith("^C")]
        after = [line[len("^C"):] for line in printed if line.startswith("^C")]
        got_before, got_after, returncode, stderr = interrupt_after(venv_python, program, project, env, len(before))
        assert returncode == 0, stderr
        # Partitions are served in no set order; within one, in offset order.
        assert sorted(got_before) == sorted(before)
        for partition in ("customer-0", "customer-1"):
            assert [line for line in got_before if partition in line] == [line for line in before if partition in line]
        assert got_after == after


def interrupt_after(python: Path, program: str, cwd: Path, env: Dict[str, str], lines: int) -> Tuple[List[str], List[str], int, str]:
    """Runs program until it printed ``lines`` lines, then presses Ctrl-C
    (SIGINT); what it printed before and after, its exit status and stderr."""
    proc = subprocess.Popen([str(python), program], cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stderr is not None
    out: "_queue.Queue[str]" = _queue.Queue()
    reader = threading.Thread(target=lambda: [out.put(line.rstrip("\n")) for line in proc.stdout], daemon=True)  # type: ignore[union-attr]
    reader.start()
    before: List[str] = []
    try:
        while len(before) < lines:
            before.append(out.get(timeout=30))
    except _queue.Empty:
        proc.kill()
        raise AssertionError(f"printed only {before}; stderr:\n{proc.stderr.read()}")
    proc.send_signal(signal.SIGINT)
    try:
        returncode = proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
    reader.join(timeout=5)
    after: List[str] = []
    while not out.empty():
        after.append(out.get())
    return before, after, returncode, proc.stderr.read()
