"""The consume loops' shared bookkeeping, without a sidecar."""

from __future__ import annotations

import datetime as dt

import pytest

from queenside import Lease, Message, PopResult, PushItem
from queenside.consume_batch import Settlement, failure_reason, forwarded_items, split_by_lease

NOW = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)


def message(lease: str, offset: int) -> Message:
    return Message("q", lease, offset, f"m{offset}", f"t{offset}", b"\xc0", NOW, lease_id=lease)


def lease(lease_id: str, first: int, last: int) -> Lease:
    return Lease(lease_id, "q", lease_id, "g", first, last, NOW, 1)


def test_messages_are_grouped_under_their_lease_in_order() -> None:
    result = PopResult([message("a", 0), message("a", 1), message("b", 7)], [lease("a", 0, 1), lease("b", 7, 7)])
    work = split_by_lease(result)
    assert [(w.lease.lease_id, [m.offset for m in w.messages]) for w in work] == [("a", [0, 1]), ("b", [7])]


def test_forwarded_items() -> None:
    item = PushItem("out", 1)
    assert forwarded_items(None) == []
    assert forwarded_items(item) == [item]
    assert forwarded_items((item, item)) == [item, item]
    assert forwarded_items(i for i in [item]) == [item]
    for wrong in (42, "text", {"queue": "out"}, [item, "x"]):
        with pytest.raises(TypeError):
            forwarded_items(wrong)


def test_failure_reasons_fit_the_sidecar() -> None:
    assert failure_reason(ValueError("bad\x00input")) == "ValueError: badinput"
    long = failure_reason(RuntimeError("é" * 5000))
    assert len(long.encode()) <= 4096
    long.encode("utf-8")  # cut on a character boundary


def test_settlement_orders_acks_and_counts() -> None:
    s = Settlement()
    s.complete(message("a", 0), [PushItem("out", 0)])
    s.fail(message("a", 1), RuntimeError("no"), lease("a", 0, 1), None)
    s.give_back(lease("b", 7, 7))
    assert [(a.offset, a.status) for a in s.acks] == [(0, "completed"), (1, "failed")]
    assert s.acks[1].error == "RuntimeError: no"
    stats = s.stats()
    assert (stats.completed, stats.failed, stats.released_leases) == (1, 1, 1)
    assert len(s.pushes) == 1 and s.release == ["b"]
