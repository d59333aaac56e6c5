"""An ordered pipeline that checks its own output.

Stage N consumes queue N and pushes what it makes to queue N+1 in one
transaction with the acks, partition kept. Some first deliveries fail on
purpose, so nacks and redeliveries happen along the way. At the end the
last queue is read back and checked: every partition holds each message
exactly once (no gap, no duplicate), in the order it was fed, having passed
every stage in turn. The exit status is 0 only then.

    python3 examples/python/pipeline.py
    python3 examples/python/pipeline.py --stages 4 --partitions 16 --messages 100
"""

from __future__ import annotations

import argparse
import logging
import sys
import threading
import time
import uuid
from typing import Any, Dict, List, Set, Tuple

import _checkout  # noqa: F401  (finds the client in a checkout)

import queenside
from queenside import Backoff, Client, Consumer, Message, PushItem

GROUP = "pipeline"


class SimulatedFailure(RuntimeError):
    """A failure made on purpose, to exercise nacks and redeliveries."""


def hide_simulated_failures(record: logging.LogRecord) -> bool:
    # The consume loop logs each handler failure at WARNING, with the
    # exception as the record's `error`; the ones made on purpose are
    # counted at the end instead.
    return not isinstance(getattr(record, "error", None), SimulatedFailure)


def lane(p: int) -> str:
    return f"lane-{p:03d}"


class Stage:
    """One step: appends its number to the message's trail and passes it on."""

    def __init__(self, run: str, number: int, out_queue: str, fail_every: int) -> None:
        self.run = run
        self.number = number
        self.out_queue = out_queue
        self.fail_every = fail_every
        self.failed_once: Set[Tuple[str, int]] = set()
        self.lock = threading.Lock()

    def handle(self, m: Message) -> List[PushItem]:
        seq = m.payload["seq"]
        if self.fail_every and (seq + self.number) % self.fail_every == 0:
            with self.lock:
                if (m.partition, seq) not in self.failed_once:
                    self.failed_once.add((m.partition, seq))
                    raise SimulatedFailure(f"stage {self.number}: simulated failure on {m.partition} #{seq}")
        out = {"seq": seq, "trail": m.payload["trail"] + [self.number]}
        # Derived from the input's id: should the transaction be retried,
        # the output is recognised as a duplicate.
        tx = queenside.transaction_id(self.run, self.number, m.transaction_id)
        return [PushItem(self.out_queue, out, partition=m.partition, transaction_id=tx)]


def feed(qs: Client, run: str, queue: str, partitions: int, messages: int) -> None:
    items = [
        PushItem(queue, {"seq": k, "trail": []}, partition=lane(p), transaction_id=queenside.transaction_id(run, "in", p, k))
        for k in range(messages)
        for p in range(partitions)
    ]
    for start in range(0, len(items), 2000):
        for r in qs.push(items[start : start + 2000]):
            r.raise_for_status()


def collect(qs: Client, queue: str, expected: int, deadline: float) -> Dict[Tuple[str, int], Dict[str, Any]]:
    """Read the last queue: payload by (partition, offset)."""
    seen: Dict[Tuple[str, int], Dict[str, Any]] = {}
    while len(seen) < expected and time.monotonic() < deadline:
        pop = qs.pop(queue, group="verify", batch=1000, partitions=100, wait_ms=500)
        for m in pop.messages:
            seen[(m.partition, m.offset)] = m.payload  # keyed by offset: a redelivery is not a duplicate
        if pop.messages:
            qs.ack(pop.messages)
    return seen


def verify(qs: Client, queues: List[str], seen: Dict[Tuple[str, int], Dict[str, Any]], partitions: int, messages: int, stages: int) -> List[str]:
    problems = []
    for p in range(partitions):
        got = [seen.get((lane(p), off)) for off in range(messages)]
        missing = [off for off, payload in enumerate(got) if payload is None]
        if missing:
            problems.append(f"{lane(p)}: gap, offsets {missing[:5]} missing")
            continue
        order = [payload["seq"] for payload in got if payload is not None]
        if order != list(range(messages)):
            problems.append(f"{lane(p)}: out of order: {order[:10]}...")
        if any(payload["trail"] != list(range(stages)) for payload in got if payload is not None):
            problems.append(f"{lane(p)}: a message skipped or repeated a stage")
    # More messages than fed anywhere along the way would be duplicates.
    for queue in queues[1:]:
        for part in qs.stats(queue).partitions:
            if part.head_offset != messages:
                problems.append(f"{queue}/{part.partition}: {part.head_offset} messages stored, expected {messages}")
    return problems


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--socket", help="sidecar socket (default: $QUEENSIDE_SOCKET or ./.queenside/queenside.sock)")
    ap.add_argument("--stages", type=int, default=3)
    ap.add_argument("--partitions", type=int, default=8)
    ap.add_argument("--messages", type=int, default=50, help="per partition")
    ap.add_argument("--fail-every", type=int, default=13, help="fail the first delivery of every Nth message per stage (0: never)")
    ap.add_argument("--concurrency", type=int, default=2, help="worker threads per stage")
    ap.add_argument("--timeout", type=float, default=120, help="give up after this many seconds")
    args = ap.parse_args()

    logging.getLogger("queenside").addFilter(hide_simulated_failures)
    run = uuid.uuid4().hex[:8]
    queues = [f"pipeline-{run}-{n}" for n in range(args.stages + 1)]
    expected = args.partitions * args.messages
    started = time.monotonic()
    errors: List[BaseException] = []
    with Client(args.socket) as qs:
        feed(qs, run, queues[0], args.partitions, args.messages)
        stages = [Stage(run, n, queues[n + 1], args.fail_every) for n in range(args.stages)]
        consumers = [
            # The simulated failures are retried after a short backoff (the
            # default waits 1 s, doubling); the stages run in threads of
            # their own, which take no signals.
            Consumer(qs, queues[n], stages[n].handle, group=GROUP, batch=25, partitions=4,
                     concurrency=args.concurrency, wait_ms=500, stop_on_signals=False,
                     failure_backoff=Backoff(initial=0.05, max=0.5))
            for n in range(args.stages)
        ]

        def run_stage(c: Consumer) -> None:
            try:
                c.run()
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=run_stage, args=(c,), daemon=True) for c in consumers]
        for t in threads:
            t.start()
        try:
            seen = collect(qs, queues[-1], expected, started + args.timeout)
        except KeyboardInterrupt:
            print("interrupted", file=sys.stderr)
            return 130
        finally:
            for c in consumers:
                c.stop()
            for t in threads:
                t.join(30)
        problems = verify(qs, queues, seen, args.partitions, args.messages, args.stages)

    problems += [f"a stage stopped: {exc!r}" for exc in errors]
    retried = sum(c.stats.failed for c in consumers)
    elapsed = time.monotonic() - started
    if problems:
        print(f"pipeline {run}: FAILED after {elapsed:.1f}s")
        for line in problems:
            print("  " + line)
        return 1
    print(
        f"pipeline {run}: {args.stages} stages, {args.partitions} partitions x {args.messages} messages: "
        f"all {expected} arrived once each, in order ({retried} simulated failures retried) in {elapsed:.1f}s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
