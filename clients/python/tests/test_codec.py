"""Encoding rules, payload handling, error mapping and transaction ids, without a sidecar."""

from __future__ import annotations

import datetime as dt
import io
from pathlib import Path

import msgpack
import pytest

import queenside
from queenside.codec import Raw, decode_payload, encode_payload, packb, time_arg, unpack_body
from queenside.errors import ERROR_CLASSES, error_from_wire
from queenside.framing import frame, read_frame

UTC = dt.timezone.utc


@pytest.mark.parametrize(
    "value, encoded",
    [
        (0, "00"),
        (300, "cd012c"),
        (70000, "ce00011170"),
        (-1, "ff"),
        (-200, "d1ff38"),
        (1.5, "cb3ff8000000000000"),
        ("é", "a2c3a9"),
        (b"\x01", "c40101"),
        (dt.datetime(2026, 11, 30, 11, 59, 59, tzinfo=UTC), "d6ff6b0d653f"),
    ],
)
def test_canonical_forms(value: object, encoded: str) -> None:
    assert packb(value).hex() == encoded


def test_raw_is_spliced_verbatim() -> None:
    # A 32-bit float, which this encoder would never write itself.
    odd = b"\xca\x3f\xc0\x00\x00"
    assert packb({"payload": Raw(odd)}) == b"\x81\xa7payload" + odd


def test_payloads_stay_raw_and_free_form_maps_do_not() -> None:
    body = packb(
        {
            "id": 7,
            "result": {
                "messages": [{"payload": Raw(b"\xca\x3f\xc0\x00\x00"), "headers": {"payload": "x"}}],
            },
        }
    )
    env = unpack_body(body)
    message = env["result"]["messages"][0]
    assert message["payload"] == Raw(b"\xca\x3f\xc0\x00\x00")
    assert message["headers"] == {"payload": "x"}
    assert packb(env) == body


def test_trailing_bytes_are_refused() -> None:
    with pytest.raises(ValueError):
        unpack_body(packb({"payload": 1}) + b"\x00")


def test_payload_values_round_trip() -> None:
    when = dt.datetime(2026, 1, 2, 3, 4, 5, 678000, tzinfo=UTC)
    value = {"n": None, "b": b"\x00\xff", "f": 0.25, "when": when, "nested": [1, {"k": "v"}], 3: "int key"}
    assert decode_payload(encode_payload(value)) == value


def test_time_arguments() -> None:
    assert time_arg(1700000000000) == 1700000000000
    assert time_arg("2026-11-30T12:00:00Z") == "2026-11-30T12:00:00Z"
    assert time_arg(dt.datetime(2026, 1, 1, tzinfo=UTC)) == msgpack.Timestamp(1767225600, 0)
    with pytest.raises(ValueError):
        time_arg(dt.datetime(2026, 1, 1))
    with pytest.raises(TypeError):
        time_arg(True)


def test_frames() -> None:
    stream = io.BytesIO(frame(b"\x80") + frame(b"\x81\xa1a\x01"))
    assert read_frame(stream) == b"\x80"
    assert read_frame(stream) == b"\x81\xa1a\x01"
    assert read_frame(stream) is None
    with pytest.raises(EOFError):
        read_frame(io.BytesIO(b"\x00\x00\x00\x05\x80"))
    with pytest.raises(ValueError):
        frame(b"")


def test_every_code_has_its_class() -> None:
    for code, cls in ERROR_CLASSES.items():
        err = error_from_wire({"code": code, "message": "m", "retryable": cls.default_retryable})
        assert type(err) is cls and err.code == code
        assert isinstance(err, queenside.QueensideError)
    assert error_from_wire({"code": "unavailable", "message": "m"}).retryable
    assert not error_from_wire({"code": "invalid_argument", "message": "m"}).retryable


def test_unknown_code_trusts_the_flag() -> None:
    err = error_from_wire({"code": "brand_new", "message": "m", "retryable": True, "details": {"a": 1}})
    assert type(err) is queenside.QueensideError
    assert (err.code, err.retryable, err.details) == ("brand_new", True, {"a": 1})
    assert not error_from_wire({"code": "brand_new", "message": "m"}).retryable


def test_conflict_carries_ack_results() -> None:
    err = error_from_wire(
        {"code": "conflict", "message": "m", "retryable": False, "details": {"acks": [{"index": 0, "success": False, "code": "lease_expired"}]}}
    )
    assert isinstance(err, queenside.ConflictError)
    assert err.acks == [queenside.AckItemResult(0, False, "lease_expired")]


def test_connection_error_is_both_kinds() -> None:
    err = queenside.ConnectionClosedError("gone")
    assert isinstance(err, ConnectionError) and isinstance(err, queenside.QueensideError)
    assert err.retryable and err.code == "connection_closed"


def test_socket_path_order(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("QUEENSIDE_SOCKET", "/x/y.sock")
    assert queenside.default_socket_path() == "/x/y.sock"
    monkeypatch.delenv("QUEENSIDE_SOCKET")
    monkeypatch.chdir(tmp_path)
    assert queenside.default_socket_path() == queenside.DEFAULT_SOCKET
    (tmp_path / ".queenside").mkdir()
    (tmp_path / ".queenside" / "queenside.sock").write_text("")
    assert queenside.default_socket_path() == queenside.DEV_SOCKET
