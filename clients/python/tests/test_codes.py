"""The codes and queue options come from the generated tables (_codes.py,
_queue_options.py, written from protocol/ by go run ./protocol/internal/gen):
every code has its class, exported; every option is a field, sent and read."""

from __future__ import annotations

import dataclasses

import queenside
from queenside import Client, QueueOptions, errors
from queenside._codes import CODES
from queenside._queue_options import QUEUE_OPTIONS


def test_every_code_has_its_class_exported() -> None:
    assert len(CODES) >= 16
    for code, retryable, name in CODES:
        assert name in queenside.__all__ and name in errors.__all__, f"{name} is not exported"
        cls = getattr(queenside, name)
        assert issubclass(cls, queenside.QueensideError)
        assert (cls.code, cls.default_retryable) == (code, retryable), name
        assert errors.ERROR_CLASSES[code] is cls
        err = errors.error_from_wire({"code": code, "message": "m"})
        assert type(err) is cls and err.retryable == retryable


def test_every_error_class_is_bound_to_a_code() -> None:
    # A class written in errors.py under a name the table does not have
    # would keep the code "unknown".
    bound = set(errors.ERROR_CLASSES.values())
    for name in dir(errors):
        obj = getattr(errors, name)
        if isinstance(obj, type) and issubclass(obj, queenside.QueensideError) and obj.__module__ == errors.__name__:
            assert obj in bound or obj in (queenside.QueensideError, queenside.ConnectionClosedError), name


def test_queue_options_hold_every_option() -> None:
    fields = {f.name: f.default for f in dataclasses.fields(QueueOptions)}
    assert fields == {attr: default for _wire, attr, default, _lo, _hi in QUEUE_OPTIONS}
    for name in ("consumption_paused", "encrypt_payloads"):
        assert name in fields
    wire = {wire: default for wire, _attr, default, _lo, _hi in QUEUE_OPTIONS}
    assert QueueOptions.from_wire(wire) == QueueOptions()
    assert QueueOptions.from_wire({}) == QueueOptions()


def test_configure_round_trips_consumption_paused(client: Client, queue: str) -> None:
    paused = QueueOptions(retry_limit=4, consumption_paused=True)
    assert client.configure(queue, paused) == paused
    assert client.pop(queue).messages == []
    (info,) = [q for q in client.queues() if q.queue == queue]
    assert info.options == paused
    assert client.configure(queue) == QueueOptions()  # every default again: resumed


def test_configure_round_trips_max_deliveries(client: Client, queue: str) -> None:
    options = QueueOptions(max_deliveries=3, retry_limit=5)
    assert options.to_wire()["maxDeliveries"] == 3
    assert client.configure(queue, options) == options
    (info,) = [q for q in client.queues() if q.queue == queue]
    assert info.options.max_deliveries == 3
    # configure replaces every option: without it, it is 0 again (and not sent).
    assert "maxDeliveries" not in QueueOptions().to_wire()
    assert client.configure(queue).max_deliveries == 0
