"""A consumer of the bench's live queue, as an application runs it: the
Python client's consume loop with its defaults, only the group set (and
concurrency when the bench passes it). Run by `queenside bench
--consumer-command "python3 sidecar/bench/apps/consume.py"`: it writes
"ready" once connected, then a line a message handled, "<push ns> <receive ns> <partition> <redelivered>",
and stops on SIGTERM as the consume loop does by default."""

import argparse
import os
import struct
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "clients", "python", "src"))

import queenside  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--socket", required=True)
    ap.add_argument("--queue", required=True)
    ap.add_argument("--group", required=True)
    ap.add_argument("--handler-wait-ms", type=float, default=0)
    ap.add_argument("--concurrency", type=int)
    args = ap.parse_args()

    lines = []
    lock = threading.Lock()
    done = threading.Event()

    def flush() -> None:
        # Written often, so that the bench counts deliveries as they come.
        while not done.wait(0.05):
            with lock:
                out, lines[:] = "".join(lines), []
            if out:
                sys.stdout.write(out)
                sys.stdout.flush()

    wait = args.handler_wait_ms / 1000

    def handle(m: queenside.Message) -> None:
        at = time.time_ns()
        # The payload is a bin whose first 8 bytes are the push time.
        (sent,) = struct.unpack_from(">Q", m.payload, 0)
        with lock:
            lines.append(f"{sent} {at} {m.partition} {int(m.redelivered)}\n")
        if wait:
            time.sleep(wait)

    options = {} if args.concurrency is None else {"concurrency": args.concurrency}
    writer = threading.Thread(target=flush, daemon=True)
    writer.start()
    with queenside.Client(args.socket) as qs:
        sys.stdout.write("ready\n")  # connected: the bench starts its window
        sys.stdout.flush()
        qs.consume(args.queue, handle, group=args.group, **options)
    done.set()
    writer.join()
    sys.stdout.write("".join(lines))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
