"""Consume orders, bill each one exactly once, and push a receipt for it.

Delivery is at least once, so the work is keyed by the message's
transaction id: the ledger (SQLite) records each order under that id and
ignores it the second time. The receipt goes out in the same transaction as
the ack, with an id derived from the order's, so a redelivered order never
yields two receipts. Ctrl-C stops it cleanly.

    python3 examples/python/worker.py                 # until Ctrl-C
    python3 examples/python/worker.py --idle-exit 3   # until nothing came for 3 s
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import sys
import tempfile
import threading
import time
from typing import List

import _checkout  # noqa: F401  (finds the client in a checkout)

import queenside
from queenside import Message, PushItem


class Ledger:
    """Billed orders, keyed by transaction id: billing the same message twice is a no-op."""

    def __init__(self, path: str) -> None:
        self.db = sqlite3.connect(path, check_same_thread=False)
        self.db.execute("CREATE TABLE IF NOT EXISTS billed (transaction_id TEXT PRIMARY KEY, order_no INTEGER, amount INTEGER)")
        self.lock = threading.Lock()

    def bill(self, transaction_id: str, order_no: int, amount: int) -> bool:
        """Record the order; False when it was billed before."""
        with self.lock, self.db:
            cur = self.db.execute(
                "INSERT OR IGNORE INTO billed VALUES (?, ?, ?)", (transaction_id, order_no, amount)
            )
            return cur.rowcount == 1


class Worker:
    def __init__(self, ledger: Ledger, results_queue: str, fail_every: int) -> None:
        self.ledger = ledger
        self.results_queue = results_queue
        self.fail_every = fail_every
        self.billed = 0
        self.repeats = 0
        self.last_activity = time.monotonic()

    def handle(self, m: Message) -> List[PushItem]:
        self.last_activity = time.monotonic()
        order = m.payload
        if self.fail_every and order["order"] % self.fail_every == 0 and not m.redelivered:
            # A stand-in for a flaky dependency: the nack brings it back.
            raise RuntimeError(f"payment service timed out for order {order['order']}")
        if self.ledger.bill(m.transaction_id, order["order"], order["amount"]):
            self.billed += 1
        else:
            self.repeats += 1
        receipt = {"order": order["order"], "amount": order["amount"], "billedFrom": m.transaction_id}
        return [
            PushItem(
                self.results_queue,
                receipt,
                partition=m.partition,
                transaction_id=queenside.transaction_id("receipt", m.transaction_id),
            )
        ]


def stop_when_idle(worker: Worker, idle: float, stop: threading.Event) -> None:
    while not stop.wait(0.2):
        if time.monotonic() - worker.last_activity > idle:
            stop.set()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--socket", help="sidecar socket (default: $QUEENSIDE_SOCKET or ./.queenside/queenside.sock)")
    ap.add_argument("--queue", default="orders")
    ap.add_argument("--group", default="fulfilment")
    ap.add_argument("--results", default="receipts", help="queue the receipts go to")
    ap.add_argument("--ledger", default=os.path.join(tempfile.gettempdir(), "queenside-example-ledger.sqlite"))
    ap.add_argument("--concurrency", type=int, default=2)
    ap.add_argument("--idle-exit", type=float, default=0, help="stop after this many seconds without a message")
    ap.add_argument("--fail-every", type=int, default=0, help="fail the first delivery of every Nth order")
    args = ap.parse_args()

    worker = Worker(Ledger(args.ledger), args.results, args.fail_every)
    stop = threading.Event()
    if args.idle_exit:
        threading.Thread(target=stop_when_idle, args=(worker, args.idle_exit, stop), daemon=True).start()
    with queenside.Client(args.socket) as qs:
        try:
            stats = qs.consume(
                args.queue, worker.handle, group=args.group, batch=20, partitions=2,
                concurrency=args.concurrency, wait_ms=1000, stop=stop,
            )
        except queenside.DrainingError:
            print("the sidecar is shutting down; stopping", file=sys.stderr)
            return 0
    print(
        f"billed {worker.billed} orders ({worker.repeats} seen before), "
        f"{stats.completed} acked, {stats.failed} failed and retried, receipts in {args.results}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
