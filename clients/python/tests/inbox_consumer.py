"""The consumer of test_tx.py's crash test, run as a child process.

It pops through the sidecar's socket and, for each message, writes the
message's effect and acks it in one transaction of its own connection
(the inbox). The effect table's primary key is the message's transaction
id: a message delivered again once its effect committed (and so its ack)
would fail that insert, which is reported (``REDELIVERED``) with exit
status 3; every message acked while an effect is missing is reported
(``LOST``) with exit status 4. It exits 0 once every message has its
effect.

To be killed at a chosen point, it sends itself SIGKILL once it has
handled ``--die-after`` messages: ``--die-at before-commit`` with the
effect written and the ack sent but not committed, ``after-commit`` right
after the commit. The test also kills it from outside at random times.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time

import psycopg

from queenside import Client, ack_tx


def lag(qs: Client, queue: str, group: str) -> int:
    return sum(g.lag for p in qs.stats(queue).partitions for g in p.groups if g.group == group)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--socket", required=True)
    ap.add_argument("--database-url", required=True)
    ap.add_argument("--queue", required=True)
    ap.add_argument("--group", required=True)
    ap.add_argument("--table", required=True)
    ap.add_argument("--total", type=int, required=True)
    ap.add_argument("--work-ms", type=float, default=0, help="how long each message's work takes, inside its transaction")
    ap.add_argument("--die-after", type=int, default=0)
    ap.add_argument("--die-at", choices=("before-commit", "after-commit"), default="before-commit")
    args = ap.parse_args()

    insert = f"INSERT INTO {args.table} (key, partition, msg_offset) VALUES (%s, %s, %s)"
    handled = 0
    with Client(args.socket, timeout=20) as qs, psycopg.connect(args.database_url) as conn:
        while True:
            done = conn.execute(f"SELECT count(*) FROM {args.table}").fetchone()[0]
            conn.commit()
            if done >= args.total:
                print(f"done: {done}", flush=True)
                return 0
            # A one-second lease: what a killed consumer held comes back soon.
            batch = qs.pop(args.queue, group=args.group, batch=5, partitions=2, wait_ms=300, lease_seconds=1)
            if not batch.messages and lag(qs, args.queue, args.group) == 0:
                # Everything is acked: every effect must be there (counted
                # again, after the acks were seen: a killed consumer's last
                # COMMIT may have landed since the count above).
                done = conn.execute(f"SELECT count(*) FROM {args.table}").fetchone()[0]
                conn.commit()
                if done < args.total:
                    print(f"LOST: every message acked, {done} effects of {args.total}", flush=True)
                    return 4
            for m in batch.messages:
                with conn.transaction():
                    try:
                        conn.execute(insert, (m.transaction_id, m.partition, m.offset))
                    except psycopg.errors.UniqueViolation:
                        print(f"REDELIVERED {m.partition}@{m.offset} ({m.transaction_id})", flush=True)
                        os._exit(3)
                    time.sleep(args.work_ms / 1000)
                    ack = ack_tx(conn, [m]).results[0]
                    if not ack.success:
                        # The lease ran out (a slow machine): the message
                        # comes again, and its effect must not stay.
                        print(f"not acked {m.partition}@{m.offset}: {ack}", flush=True)
                        raise psycopg.Rollback()
                    handled += 1
                    if handled == args.die_after and args.die_at == "before-commit":
                        os.kill(os.getpid(), signal.SIGKILL)
                if handled == args.die_after and args.die_at == "after-commit":
                    os.kill(os.getpid(), signal.SIGKILL)
                if not ack.success:
                    break  # the rest of the lease is gone too


if __name__ == "__main__":
    sys.exit(main())
