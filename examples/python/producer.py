"""Push numbered orders into a queue, one partition per customer.

Transaction ids are derived from the order number, so running it twice
pushes nothing new: the second run is answered ``duplicate`` item by item.

    python3 examples/python/producer.py -n 100
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter

import _checkout  # noqa: F401  (finds the client in a checkout)

import queenside


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--socket", help="sidecar socket (default: $QUEENSIDE_SOCKET or ./.queenside/queenside.sock)")
    ap.add_argument("--queue", default="orders")
    ap.add_argument("-n", type=int, default=100, help="how many orders")
    ap.add_argument("--first", type=int, default=0, help="number of the first order")
    ap.add_argument("--customers", type=int, default=4, help="partitions: one per customer")
    args = ap.parse_args()

    items = [
        queenside.PushItem(
            args.queue,
            {"order": n, "customer": n % args.customers, "amount": 10 + n % 7},
            partition=f"customer-{n % args.customers}",
            # The same order always gets the same id: a retry is a duplicate.
            transaction_id=queenside.transaction_id("order", n),
        )
        for n in range(args.first, args.first + args.n)
    ]
    with queenside.Client(args.socket) as qs:
        results = []
        for start in range(0, len(items), 1000):  # keeps each request small
            results.extend(qs.push(items[start : start + 1000]))
    counts = Counter(r.status for r in results)
    for r in results:
        if r.error is not None:
            print(f"order {args.first + r.index} failed: {r.error}", file=sys.stderr)
    print(f"pushed {len(results)} orders to {args.queue}: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    return 1 if counts.get("failed") else 0


if __name__ == "__main__":
    sys.exit(main())
