"""Push and ack inside the application's own PostgreSQL transaction.

``push_tx(conn, items)`` and ``ack_tx(conn, items)`` (and their asyncio
twins ``push_tx_async`` and ``ack_tx_async``) run queenside's SQL API
(``queenside.send_batch`` and ``queenside.ack_message``, schema migrations
14 and 15) on the caller's psycopg 3 connection or cursor, one statement a
queue pushed to and one an item acked, in the caller's transaction: what they push or ack commits or rolls back with
the rows the application writes beside it (the transactional outbox, and
the inbox). They never BEGIN or COMMIT.

psycopg is not imported here, nor anywhere in the client: the helpers only
call ``.cursor()``, ``.execute(query, params)`` and ``.fetchone()`` on what
they are given, so the client's one dependency stays msgpack.

Items are those of ``push`` and ``ack`` and are checked the same way;
payloads are encoded with the client's codec, the bytes a push through the
sidecar stores. The results are those of ``push`` and ``ack``. A refusal of
the SQL API (its DETAIL is a protocol code: ``invalid_argument``,
``unavailable``, ``unsupported``) raises that code's error class with the
database error as its ``__cause__``; any other database error propagates
as it is. Either way the caller's transaction is then aborted: roll it back.
"""

from __future__ import annotations

import inspect
import json
import re
from typing import Any, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

from .acks import AckLike, ack_items
from .codec import encode_payload
from .errors import ERROR_CLASSES, InvalidArgumentError, QueensideError
from .items import AckItem, PushItem, PushLike, push_items
from .results import AckItemResult, AckResult, PushResult
from .tracing import with_trace_context

__all__ = ["push_tx", "ack_tx", "push_tx_async", "ack_tx_async", "DEFAULT_PARTITION"]

# The partition of an item that names none, as queenside.send and a push
# through the sidecar default it.
DEFAULT_PARTITION = "Default"

# A psycopg 3 Connection or Cursor (sync), or an AsyncConnection or
# AsyncCursor: typed loosely so that psycopg stays optional.
PgConnection = Any

_SEND_COLUMNS = ("statuses", "offsets", "message_ids", "transaction_ids")
_ACK_COLUMNS = ("success", "code", "dead_lettered")

# The SQLSTATEs of the SQL API's refusals: invalid_parameter_value for
# invalid_argument, object_not_in_prerequisite_state for the others.
_REFUSAL_STATES = frozenset({"22023", "55000"})


def _no_items() -> InvalidArgumentError:
    # As the sidecar answers a push or an ack without items.
    return InvalidArgumentError("items: must hold at least one item")


class Statement:
    """One call of the SQL API: a function, its named arguments (each with
    its type) and their values. Rendered for the cursor that runs it:
    ``%s`` placeholders, or ``$1``... for psycopg's raw cursors."""

    __slots__ = ("select", "function", "tail", "args", "values")

    def __init__(self, select: str, function: str, tail: str = "") -> None:
        self.select = select
        self.function = function
        self.tail = tail
        self.args: List[Tuple[str, str]] = []
        self.values: List[Any] = []

    def arg(self, name: str, type_: str, value: Any) -> "Statement":
        self.args.append((name, type_))
        self.values.append(value)
        return self

    def query(self, raw: bool) -> str:
        marks = [f"${n}" if raw else "%s" for n in range(1, len(self.args) + 1)]
        named = ", ".join(f"{name} => {mark}::{type_}" for (name, type_), mark in zip(self.args, marks))
        return f"SELECT {self.select} FROM queenside.{self.function}({named}){self.tail}"


def _send_statement(items: Sequence[PushItem]) -> Statement:
    """``queenside.send_batch`` of items, all of one queue, answering one row
    of arrays in the items' order. An array none of the items fills is left
    out, so that the function's own default applies."""
    st = Statement(
        'array_agg(b.status ORDER BY b.n) AS statuses, array_agg(b."offset" ORDER BY b.n) AS offsets, '
        "array_agg(b.message_id::text ORDER BY b.n) AS message_ids, array_agg(b.transaction_id ORDER BY b.n) AS transaction_ids",
        "send_batch",
        ' WITH ORDINALITY AS b (status, "offset", message_id, transaction_id, n)',
    )
    st.arg("p_queue", "text", items[0].queue).arg("p_payloads", "bytea[]", [encode_payload(it.payload) for it in items])
    st.arg("p_partitions", "text[]", [_partition(it) for it in items])
    if any(it.transaction_id is not None for it in items):
        st.arg("p_transaction_ids", "text[]", [it.transaction_id for it in items])
    if any(it.headers for it in items):
        st.arg("p_headers", "jsonb[]", [json.dumps(dict(it.headers)) if it.headers else None for it in items])
    if any(it.trace_id is not None for it in items):
        st.arg("p_trace_ids", "text[]", [it.trace_id for it in items])
    return st


def _partition(item: PushItem) -> str:
    return item.partition if item.partition is not None else DEFAULT_PARTITION


def _ack_statement(item: AckItem) -> Statement:
    st = Statement("success, code, dead_lettered", "ack_message")
    st.arg("p_lease_id", "text", item.lease_id).arg("p_offset", "bigint", item.offset).arg("p_status", "text", item.status)
    st.arg("p_error", "text", item.error).arg("p_transaction_id", "text", item.transaction_id)
    return st


def _raw(cursor: Any) -> bool:
    """Whether the cursor takes ``$1`` placeholders (psycopg's RawCursor and its kin)."""
    return "Raw" in type(cursor).__name__


# A plan is the statements to run, each with the indexes of the items it
# carries.
Plan = List[Tuple[List[int], Statement]]


def _push_plan(items: Union[PushLike, Iterable[PushLike]]) -> Tuple[List[PushItem], Plan]:
    # Every item is checked (and encoded) before the first statement runs,
    # as push checks them before anything is sent. A statement a queue,
    # the queues in the order they first appear.
    checked = list(with_trace_context(push_items(items)))
    if not checked:
        raise _no_items()
    by_queue: dict = {}
    for index, item in enumerate(checked):
        by_queue.setdefault(item.queue, []).append(index)
    return checked, [(indexes, _send_statement([checked[i] for i in indexes])) for indexes in by_queue.values()]


def _ack_plan(items: Iterable[AckLike]) -> Plan:
    if isinstance(items, (str, bytes, Mapping)) or not isinstance(items, Iterable):
        raise TypeError(f"ack_tx takes a list of AckItem or popped Message objects, not {type(items).__name__}")
    checked = ack_items(items)
    if not checked:
        raise _no_items()
    return [([index], _ack_statement(item)) for index, item in enumerate(checked)]


def _columns(row: Any, names: Sequence[str]) -> List[Any]:
    """The row's columns, whatever the connection's row factory made of it."""
    if row is None:
        raise QueensideError("the SQL API answered no row")
    if isinstance(row, Mapping):
        return [row[name] for name in names]
    if isinstance(row, Sequence) and not isinstance(row, (str, bytes)):
        return list(row)[: len(names)]
    return [getattr(row, name) for name in names]


def _push_results(items: Sequence[PushItem], plan: Plan, rows: Sequence[Any]) -> List[PushResult]:
    results: List[Optional[PushResult]] = [None] * len(items)
    for (indexes, _), row in zip(plan, rows):
        columns = zip(*_columns(row, _SEND_COLUMNS))
        for index, (status, offset, message_id, transaction_id) in zip(indexes, columns):
            item = items[index]
            results[index] = PushResult(
                index=index,
                status=status,
                queue=item.queue,
                partition=_partition(item),
                transaction_id=transaction_id,
                message_id=None if message_id is None else str(message_id),
                offset=offset,
            )
    return results  # type: ignore[return-value] # every index is in one statement


def _ack_result(index: int, row: Any) -> AckItemResult:
    success, code, dead_lettered = _columns(row, _ACK_COLUMNS)
    return AckItemResult(index=index, success=bool(success), code=code or None, dead_lettered=bool(dead_lettered))


# How the SQL API names the message of a batch a refusal is about,
# counted from 1.
_MESSAGE_NUMBER = re.compile(r"message ([0-9]+): ")


def _refusal(exc: BaseException, kind: str, indexes: Sequence[int]) -> Optional[QueensideError]:
    """The client's error for a refusal of the SQL API, None for any other
    error; it names the item as ``push`` would (``indexes``: the
    statement's items)."""
    state = getattr(exc, "sqlstate", None)
    diag = getattr(exc, "diag", None)
    code = getattr(diag, "message_detail", None)
    if state not in _REFUSAL_STATES or not isinstance(code, str) or code not in ERROR_CLASSES:
        return None
    message = getattr(diag, "message_primary", None) or str(exc)
    if message.startswith("queenside: "):
        message = message[len("queenside: ") :]
    what = kind
    number = _MESSAGE_NUMBER.match(message)
    if number and 1 <= int(number.group(1)) <= len(indexes):
        what, message = f"{kind} item {indexes[int(number.group(1)) - 1]}", message[number.end() :]
    elif len(indexes) == 1:
        what = f"{kind} item {indexes[0]}"
    return ERROR_CLASSES[code](f"{what}: {message}", code=code, details={"sqlstate": state})


def _sync_only(conn: PgConnection, helper: str) -> None:
    if inspect.iscoroutinefunction(getattr(conn, "execute", None)):
        raise TypeError(f"{helper} takes a psycopg Connection or Cursor; with an AsyncConnection or AsyncCursor use {helper}_async")


def _async_only(conn: PgConnection, helper: str) -> None:
    if not inspect.iscoroutinefunction(getattr(conn, "execute", None)):
        raise TypeError(f"{helper}_async takes a psycopg AsyncConnection or AsyncCursor; with a Connection or Cursor use {helper}")


def _is_cursor(conn: PgConnection) -> bool:
    return hasattr(conn, "fetchone")


def _run(conn: PgConnection, plan: Plan, kind: str) -> List[Any]:
    if _is_cursor(conn):
        return _run_on(conn, plan, kind)
    with conn.cursor() as cursor:
        return _run_on(cursor, plan, kind)


def _run_on(cursor: Any, plan: Plan, kind: str) -> List[Any]:
    rows: List[Any] = []
    raw = _raw(cursor)
    for indexes, statement in plan:
        try:
            cursor.execute(statement.query(raw), statement.values)
            rows.append(cursor.fetchone())
        except Exception as exc:
            refusal = _refusal(exc, kind, indexes)
            if refusal is None:
                raise
            raise refusal from exc
    return rows


async def _run_async(conn: PgConnection, plan: Plan, kind: str) -> List[Any]:
    if _is_cursor(conn):
        return await _run_on_async(conn, plan, kind)
    async with conn.cursor() as cursor:
        return await _run_on_async(cursor, plan, kind)


async def _run_on_async(cursor: Any, plan: Plan, kind: str) -> List[Any]:
    rows: List[Any] = []
    raw = _raw(cursor)
    for indexes, statement in plan:
        try:
            await cursor.execute(statement.query(raw), statement.values)
            rows.append(await cursor.fetchone())
        except Exception as exc:
            refusal = _refusal(exc, kind, indexes)
            if refusal is None:
                raise
            raise refusal from exc
    return rows


def push_tx(conn: PgConnection, items: Union[PushLike, Iterable[PushLike]]) -> List[PushResult]:
    """Push ``items`` in the transaction open on ``conn`` (a psycopg 3
    ``Connection`` or ``Cursor``): they are stored if and only if it commits.

    ``items`` are as ``push`` takes them (one item or a list; a ``PushItem``
    or a dict) and are checked as it checks them, before any statement
    runs. The items of a queue are one ``queenside.send_batch`` statement;
    the results are those of ``push`` (``queued`` with its offset and message id, or ``duplicate``
    with the original's), without ``committed_at``, since nothing is
    committed yet. The partitions' locks are held until the transaction
    ends, so push last, just before COMMIT. Its wait is bounded by the
    connection's own timeouts (``statement_timeout``...), not by the
    sidecar's ``--database-timeout``.
    """
    _sync_only(conn, "push_tx")
    checked, plan = _push_plan(items)
    return _push_results(checked, plan, _run(conn, plan, "push"))


def ack_tx(conn: PgConnection, items: Iterable[AckLike]) -> AckResult:
    """Ack ``items`` in the transaction open on ``conn`` (a psycopg 3
    ``Connection`` or ``Cursor``): the acks take effect if and only if it
    commits; a rollback leaves the leases as they were.

    ``items`` are as ``ack`` takes them: popped messages (completed), or
    ``message.completed()`` / ``message.failed(reason)`` / ``AckItem``.
    Each is one ``queenside.ack_message`` statement. The result is that of
    ``ack``, one ``AckItemResult`` per item (``leases`` is empty): an item
    that did not succeed (``already_acked``, ``lease_expired``, ...) is not
    raised, so check ``results`` and roll back what depended on it.
    """
    _sync_only(conn, "ack_tx")
    plan = _ack_plan(items)
    rows = _run(conn, plan, "ack")
    return AckResult(results=[_ack_result(index, row) for index, row in enumerate(rows)], leases=[])


async def push_tx_async(conn: PgConnection, items: Union[PushLike, Iterable[PushLike]]) -> List[PushResult]:
    """``push_tx`` with a psycopg 3 ``AsyncConnection`` or ``AsyncCursor``."""
    _async_only(conn, "push_tx")
    checked, plan = _push_plan(items)
    return _push_results(checked, plan, await _run_async(conn, plan, "push"))


async def ack_tx_async(conn: PgConnection, items: Iterable[AckLike]) -> AckResult:
    """``ack_tx`` with a psycopg 3 ``AsyncConnection`` or ``AsyncCursor``."""
    _async_only(conn, "ack_tx")
    plan = _ack_plan(items)
    rows = await _run_async(conn, plan, "ack")
    return AckResult(results=[_ack_result(index, row) for index, row in enumerate(rows)], leases=[])
