"""The programs in examples/python, run end to end (short runs) against the test sidecar."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List

from harness import REPO, Sidecar

import queenside

EXAMPLES = REPO / "examples" / "python"


def example_env(sidecar: Sidecar) -> Dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("QUEENSIDE_")}
    env["QUEENSIDE_SOCKET"] = sidecar.socket
    env["PYTHONUNBUFFERED"] = "1"
    return env


def run_example(sidecar: Sidecar, script: str, *args: str, timeout: float = 60) -> "subprocess.CompletedProcess[str]":
    return subprocess.run(
        [sys.executable, str(EXAMPLES / script), *args],
        env=example_env(sidecar),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_producer_then_worker(sidecar: Sidecar, queue: str, tmp_path: Path) -> None:
    receipts = queue + "-receipts"
    first = run_example(sidecar, "producer.py", "--queue", queue, "-n", "40")
    assert first.returncode == 0, first.stderr
    assert "queued 40" in first.stdout
    again = run_example(sidecar, "producer.py", "--queue", queue, "-n", "40")
    assert "duplicate 40" in again.stdout

    ledger = str(tmp_path / "ledger.sqlite")
    work = run_example(
        sidecar, "worker.py", "--queue", queue, "--results", receipts, "--ledger", ledger, "--idle-exit", "3", "--fail-every", "7"
    )
    assert work.returncode == 0, work.stderr
    assert "billed 40 orders" in work.stdout

    with queenside.Client(sidecar.socket) as qs:
        got = qs.pop(receipts, batch=100, partitions=10, auto_ack=True).messages
        assert sorted(m.payload["order"] for m in got) == list(range(40))
        # Each order's receipts stayed in its customer's partition, in order.
        for m in got:
            assert m.partition == f"customer-{m.payload['order'] % 4}"
        for partition in {m.partition for m in got}:
            orders = [m.payload["order"] for m in got if m.partition == partition]
            assert orders == sorted(orders)


def test_worker_stops_on_sigint(sidecar: Sidecar, queue: str, tmp_path: Path) -> None:
    run_example(sidecar, "producer.py", "--queue", queue, "-n", "5")
    proc = subprocess.Popen(
        [sys.executable, str(EXAMPLES / "worker.py"), "--queue", queue, "--results", queue + "-r", "--ledger", str(tmp_path / "l.sqlite")],
        env=example_env(sidecar),
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    # Wait until the five orders were taken, then ask it to stop.
    with queenside.Client(sidecar.socket) as qs:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            groups = qs.groups(queue)
            if groups and groups[0].lag == 0:
                break
            time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err
    assert "billed 5 orders" in out


def test_pipeline_checks_itself(sidecar: Sidecar) -> None:
    res = run_example(sidecar, "pipeline.py", "--stages", "3", "--partitions", "4", "--messages", "30", "--timeout", "60")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "all 120 arrived once each, in order" in res.stdout


def test_examples_have_a_readme() -> None:
    readme = (EXAMPLES / "README.md").read_text()
    scripts: List[str] = sorted(p.name for p in EXAMPLES.glob("*.py") if not p.name.startswith("_"))
    for script in scripts:
        assert script in readme
