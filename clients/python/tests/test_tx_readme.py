"""The README's "Inside your own transaction", run as printed: its tables
created in the sidecar's database, its programs saved as they are in a
fresh project and run as its "Run them" block says, against the test
sidecar, and what they print checked against what the README says."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import List

import psycopg

from harness import REPO, Sidecar
from readme import printed_runs, programs, section

import queenside


def sql_blocks(text: str) -> List[str]:
    return re.findall(r"```sql\n(.*?)```", text, re.S)


def test_the_outbox_and_the_inbox_run_as_printed(sidecar: Sidecar, database_url: str, tmp_path: Path) -> None:
    text = section("Inside your own transaction")
    [tables] = sql_blocks(text)
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(tables)

    project = tmp_path / "project"
    project.mkdir()
    found = programs(text)
    assert sorted(found) == ["inbox.py", "outbox.py"]
    for name, code in found.items():
        (project / name).write_text(code)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("QUEENSIDE_", "PYTHON"))}
    env["DATABASE_URL"] = database_url  # the README's export
    env["QUEENSIDE_SOCKET"] = sidecar.socket
    env["PYTHONPATH"] = str(REPO / "clients" / "python" / "src")
    env["PYTHONUNBUFFERED"] = "1"

    def run(command: str) -> "subprocess.CompletedProcess[str]":
        args = command.split()
        assert args[0] == "python"
        return subprocess.run([sys.executable, *args[1:]], cwd=project, env=env, capture_output=True, text=True, timeout=60)

    runs = printed_runs(text)
    assert [command.split()[1] for command, _ in runs] == ["outbox.py"] * 3 + ["inbox.py"]
    for command, printed in runs:
        done = run(command)
        assert done.returncode == 0, done.stderr
        if command.startswith("python outbox.py"):
            assert done.stdout.splitlines() == printed
            continue
        got = done.stdout.splitlines()
        # Partitions are served in no set order; within one, in offset order.
        assert sorted(got) == sorted(printed)
        for partition in ("alice", "bob"):
            assert [line for line in got if f"({partition}," in line] == [line for line in printed if f"({partition}," in line]

    # "once more fails on the orders table's primary key ...: no second event."
    again = run("python outbox.py 3 alice 5")
    assert again.returncode != 0 and "UniqueViolation" in again.stderr, again.stderr
    with queenside.Client(sidecar.socket) as qs:
        heads = {p.partition: p.head_offset for p in qs.stats("order-created").partitions}
        assert sum(g.lag for p in qs.stats("order-created").partitions for g in p.groups) == 0
    with psycopg.connect(database_url) as conn:
        assert conn.execute("SELECT order_id, total FROM receipts ORDER BY order_id").fetchall() == [(1, 42), (2, 7), (3, 5)]
        assert conn.execute("SELECT count(*) FROM orders").fetchone() == (3,)
    assert heads == {"alice": 2, "bob": 1}, heads  # three events, none more
