"""push_tx and ack_tx: pushes and acks in the application's own PostgreSQL
transaction (psycopg 3), against the sidecar's database and the sidecar.

The outbox (an application row and its messages commit together, or
neither does), deduplication against pushes through the socket, the inbox
(an effect and its ack commit together), the inbox under SIGKILL at random
points, refusals, and the asyncio helpers.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Iterator, List

import psycopg
import pytest
from psycopg.rows import dict_row

from harness import REPO, Sidecar

import queenside
from queenside import AckItem, Client, PushItem, ack_tx, ack_tx_async, push_tx, push_tx_async

TESTS = Path(__file__).resolve().parent


@pytest.fixture
def db(database_url: str) -> Iterator[psycopg.Connection[Any]]:
    """An application's connection (not in autocommit: statements open a transaction)."""
    with psycopg.connect(database_url) as conn:
        yield conn


@pytest.fixture(scope="module")
def app_tables(database_url: str) -> None:
    """The application's own tables: orders (the outbox's row) and effects (the inbox's)."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS app_orders (queue text, id int, PRIMARY KEY (queue, id))")
        conn.execute("CREATE TABLE IF NOT EXISTS app_effects (queue text, msg_offset bigint, PRIMARY KEY (queue, msg_offset))")


def count(db: psycopg.Connection[Any], table: str, queue: str) -> int:
    n = db.execute(f"SELECT count(*) FROM {table} WHERE queue = %s", (queue,)).fetchone()[0]  # type: ignore[index]
    db.rollback()
    return int(n)


def cursor_of(client: Client, queue: str, group: str = "", partition: str = "Default") -> int:
    for p in client.stats(queue).partitions:
        if p.partition == partition:
            for g in p.groups:
                if g.group == group:
                    return g.cursor
    return 0


# The outbox.


def test_outbox_commit_delivers_in_offset_order_and_rollback_leaves_no_gap(
    client: Client, db: psycopg.Connection[Any], queue: str, app_tables: None
) -> None:
    with db.transaction():
        db.execute("INSERT INTO app_orders VALUES (%s, 1)", (queue,))
        results = push_tx(
            db,
            [
                PushItem(queue, {"order": 1, "lines": [1, 2.5, "x"]}, partition="p"),
                {"queue": queue, "payload": b"\x00raw", "partition": "p", "transactionId": "order-1-b", "headers": {"k": "v"}},
            ],
        )
    assert [r.status for r in results] == ["queued", "queued"]
    assert [r.offset for r in results] == [0, 1]
    assert [r.index for r in results] == [0, 1]
    assert all(r.queue == queue and r.partition == "p" and r.ok and r.error is None for r in results)
    assert results[0].transaction_id  # generated
    assert results[1].transaction_id == "order-1-b"
    assert results[0].message_id and results[1].message_id and results[0].message_id != results[1].message_id

    got = client.pop(queue, batch=10, auto_ack=True).messages
    assert [m.offset for m in got] == [0, 1]
    assert [m.payload for m in got] == [{"order": 1, "lines": [1, 2.5, "x"]}, b"\x00raw"]
    assert [m.message_id for m in got] == [r.message_id for r in results]
    assert [m.transaction_id for m in got] == [r.transaction_id for r in results]
    assert got[1].headers == {"k": "v"}
    # The bytes a push through the socket stores for the same value.
    client.push(PushItem(queue + "-socket", {"order": 1, "lines": [1, 2.5, "x"]}))
    assert client.pop(queue + "-socket", auto_ack=True).messages[0].payload_raw == got[0].payload_raw

    # Rolled back: neither the row nor the message, and no offset used.
    with db.transaction():
        db.execute("INSERT INTO app_orders VALUES (%s, 2)", (queue,))
        [gone] = push_tx(db, PushItem(queue, "rolled back", partition="p"))
        assert (gone.status, gone.offset) == ("queued", 2)
        raise psycopg.Rollback()
    assert count(db, "app_orders", queue) == 1
    assert client.pop(queue, batch=10, auto_ack=True).messages == []
    [after] = client.push(PushItem(queue, "next", partition="p"))
    assert after.offset == 2
    # And the default partition, through a cursor this time.
    with db.transaction(), db.cursor() as cur:
        [d] = push_tx(cur, {"queue": queue, "payload": None})
    assert (d.partition, d.offset) == ("Default", 0)
    assert client.pop(queue, partition="Default", auto_ack=True).messages[0].payload is None


def test_transaction_id_deduplicates_against_the_socket_both_ways(client: Client, db: psycopg.Connection[Any], queue: str) -> None:
    with db.transaction():
        [first] = push_tx(db, PushItem(queue, "sql first", transaction_id="a"))
    [again] = client.push(PushItem(queue, "socket second", transaction_id="a"))
    assert first.status == "queued"
    assert (again.status, again.message_id, again.offset) == ("duplicate", first.message_id, first.offset)

    [socket_first] = client.push(PushItem(queue, "socket first", transaction_id="b"))
    with db.transaction():
        [sql_again] = push_tx(db, PushItem(queue, "sql second", transaction_id="b"))
    assert socket_first.status == "queued"
    assert (sql_again.status, sql_again.message_id, sql_again.offset) == ("duplicate", socket_first.message_id, socket_first.offset)
    assert sql_again.transaction_id == "b"

    # A duplicate within one transaction too.
    with db.transaction():
        one, two = push_tx(db, [PushItem(queue, 1, transaction_id="c"), PushItem(queue, 2, transaction_id="c")])
    assert (one.status, two.status, two.message_id) == ("queued", "duplicate", one.message_id)
    assert [m.payload for m in client.pop(queue, batch=10, auto_ack=True).messages] == ["sql first", "socket first", 1]


def test_any_row_factory_and_raw_cursors(client: Client, database_url: str, queue: str) -> None:
    with psycopg.connect(database_url, row_factory=dict_row) as conn:
        with conn.transaction():
            [r] = push_tx(conn, PushItem(queue, "dict rows"))
        assert (r.status, r.offset) == ("queued", 0)
        m = client.pop(queue).messages[0]
        with conn.transaction():
            res = ack_tx(conn, [m])
        assert [(x.index, x.success, x.code) for x in res.results] == [(0, True, None)]
    # %s for a client-side cursor, $1 for a raw one (psycopg 3.2 and later).
    for factory in [psycopg.ClientCursor, *([psycopg.RawCursor] if hasattr(psycopg, "RawCursor") else [])]:
        with psycopg.connect(database_url, cursor_factory=factory) as conn:  # type: ignore[call-overload]
            with conn.transaction():
                [r] = push_tx(conn, PushItem(queue, factory.__name__, partition="p", headers={"h": "1"}))
            m = client.pop(queue, partition="p").messages[0]
            assert (m.payload, m.headers) == (factory.__name__, {"h": "1"})
            with conn.transaction():
                assert ack_tx(conn, [m]).all_succeeded


class RawCursor:
    """What the helpers see of psycopg 3.2's RawCursor (``$1`` placeholders;
    older psycopg has none), run on a real cursor as PREPARE and EXECUTE."""

    def __init__(self, cur: "psycopg.ClientCursor[Any]") -> None:
        self.cur = cur
        self.queries: List[str] = []
        self.row: Any = None

    def execute(self, query: str, params: List[Any]) -> "RawCursor":
        self.queries.append(query)
        # By the simple query protocol: under the extended one, the server
        # would take the $n for parameters of the PREPARE itself.
        done = self.cur.connection.pgconn.exec_(f"PREPARE qs_raw AS {query}".encode())
        assert done.status == psycopg.pq.ExecStatus.COMMAND_OK, done.error_message
        self.cur.execute("EXECUTE qs_raw (" + ", ".join(["%s"] * len(params)) + ")", params)
        self.row = self.cur.fetchone()
        self.cur.execute("DEALLOCATE qs_raw")
        return self

    def fetchone(self) -> Any:
        return self.row


def test_raw_cursors_get_numbered_placeholders(client: Client, db: psycopg.Connection[Any], queue: str) -> None:
    raw = RawCursor(psycopg.ClientCursor(db))  # EXECUTE's arguments as literals
    with db.transaction():
        [r] = push_tx(raw, PushItem(queue, "raw", partition="p", transaction_id="raw-1", headers={"h": "1"}))
    assert (
        "queenside.send_batch(p_queue => $1::text, p_payloads => $2::bytea[], p_partitions => $3::text[], "
        "p_transaction_ids => $4::text[], p_headers => $5::jsonb[])" in raw.queries[0]
    )
    m = client.pop(queue, partition="p").messages[0]
    assert (r.status, m.payload, m.headers, m.transaction_id) == ("queued", "raw", {"h": "1"}, "raw-1")
    with db.transaction():
        assert ack_tx(raw, [m]).all_succeeded
    assert "(p_lease_id => $1::text, p_offset => $2::bigint" in raw.queries[1]


# The inbox.


def test_inbox_ack_commits_and_rolls_back_with_the_effect(
    client: Client, db: psycopg.Connection[Any], queue: str, app_tables: None
) -> None:
    client.push([PushItem(queue, n, transaction_id=f"m-{n}") for n in range(3)])
    batch = client.pop(queue, group="g", batch=1)
    [first] = batch.messages

    # Rolled back: no effect, and the lease is as it was.
    with db.transaction():
        db.execute("INSERT INTO app_effects VALUES (%s, %s)", (queue, first.offset))
        res = ack_tx(db, [first])
        assert res.all_succeeded and res.leases == []
        raise psycopg.Rollback()
    assert count(db, "app_effects", queue) == 0
    assert cursor_of(client, queue, "g") == 0
    assert client.renew([batch.leases[0].lease_id])[0].success  # still held

    # Committed: the effect, and the cursor moved.
    with db.transaction():
        db.execute("INSERT INTO app_effects VALUES (%s, %s)", (queue, first.offset))
        res = ack_tx(db, [first])
    assert [(r.index, r.success, r.code, r.dead_lettered) for r in res.results] == [(0, True, None, False)]
    assert count(db, "app_effects", queue) == 1
    assert cursor_of(client, queue, "g") == 1

    # Again (the lease ended with its last message): already acked, which
    # the consumer sees before it commits.
    with db.transaction():
        again = ack_tx(db, [first.completed()])
        raise psycopg.Rollback()
    assert [(r.success, r.code) for r in again.results] == [(False, queenside.ALREADY_ACKED)]
    assert str(again.results[0]) == "ack item 0: already acknowledged (already_acked)"

    # A failure rewinds: the second message comes again.
    [second] = client.pop(queue, group="g", batch=2).messages[:1]
    with db.transaction():
        res = ack_tx(db, [second.failed("it broke")])
    assert res.all_succeeded
    redelivered = client.pop(queue, group="g", batch=1).messages[0]
    assert (redelivered.offset, redelivered.redelivered) == (second.offset, True)
    # By transaction id.
    with db.transaction():
        res = ack_tx(db, [AckItem(redelivered.lease_id or "", transaction_id="m-1")])
    assert res.all_succeeded
    assert cursor_of(client, queue, "g") == 2


# The inbox under crashes: a consumer that writes its effect and acks in
# one transaction, killed with SIGKILL at random points, restarted until
# everything is done.
#
# At 20 ms a message a run killed from outside within a second gets
# through 50 at the most, and one that kills itself through 4: the six
# runs before the last take at most 116 of the 200, so each of them is
# killed before the work is done.

CRASH_MESSAGES = 200


def test_inbox_under_sigkill_applies_every_effect_once(client: Client, sidecar: Sidecar, database_url: str, queue: str) -> None:
    seed = int(os.environ.get("QUEENSIDE_TEST_SEED") or random.randrange(1 << 30))
    rng = random.Random(seed)
    table = "crash_effects"
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(f"DROP TABLE IF EXISTS {table}")
        conn.execute(f"CREATE TABLE {table} (key text PRIMARY KEY, partition text, msg_offset bigint, seq bigserial)")
    items = [PushItem(queue, {"n": n}, partition=f"p{n % 2}", transaction_id=f"crash-{n}") for n in range(CRASH_MESSAGES)]
    assert all(r.status == "queued" for r in client.push(items))

    env = {k: v for k, v in os.environ.items() if not k.startswith("QUEENSIDE_")}
    env["PYTHONPATH"] = str(REPO / "clients" / "python" / "src")
    base = [
        sys.executable,
        str(TESTS / "inbox_consumer.py"),
        "--socket", sidecar.socket,
        "--database-url", database_url,
        "--queue", queue,
        "--group", "inbox",
        "--table", table,
        "--total", str(CRASH_MESSAGES),
        "--work-ms", "20",
    ]  # fmt: skip
    # Each kind of kill more than once, in a random order: itself before
    # the commit (effect written, ack sent), itself right after it, and
    # from outside at a random time.
    runs = ["before-commit", "after-commit", "outside"] * 2
    rng.shuffle(runs)
    log: List[str] = []
    effects = 0
    deadline = time.monotonic() + 120
    finished = False
    for run in [*runs, "to the end"]:
        args = list(base)
        die_after = rng.randint(1, 4)
        if run in ("before-commit", "after-commit"):
            args += ["--die-after", str(die_after), "--die-at", run]
        proc = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            if run == "outside":
                time.sleep(rng.uniform(0.3, 1.0))
                proc.send_signal(signal.SIGKILL)
            out, _ = proc.communicate(timeout=max(deadline - time.monotonic(), 1))
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
            pytest.fail(f"seed {seed}: the consumer did not finish ({run}); runs so far: {log}\n{out}")
        before, effects = effects, count_rows(database_url, table)
        log.append(f"{run}: exit {proc.returncode}, {effects} effects")
        if proc.returncode == -signal.SIGKILL and run != "outside":
            # Killed before its die_after-th commit, that message's effect
            # is gone with its ack; killed after it, both are there.
            assert effects - before == die_after - (run == "before-commit"), f"seed {seed}: {log}"
        assert "REDELIVERED" not in out, f"seed {seed}: an acked message was delivered again ({run}):\n{out}\nruns: {log}"
        assert "LOST" not in out, f"seed {seed}: a message was acked without its effect ({run}):\n{out}\nruns: {log}"
        assert proc.returncode in (0, -signal.SIGKILL), f"seed {seed}: {run}: exit {proc.returncode}\n{out}"
        if proc.returncode == 0:
            finished = True
            if run == "to the end":
                break
    assert finished, f"seed {seed}: never finished: {log}"
    killed = sum(1 for line in log if f"exit {-signal.SIGKILL}" in line)
    assert killed == len(runs), f"seed {seed}: a run before the last was not killed: {log}"
    print(f"seed {seed}: " + "; ".join(log))

    with psycopg.connect(database_url) as conn:
        rows = conn.execute(f"SELECT key, partition, msg_offset FROM {table} ORDER BY seq").fetchall()
    # Every message's effect, exactly once (the key is unique, and all are there) ...
    assert sorted(key for key, _, _ in rows) == sorted(f"crash-{n}" for n in range(CRASH_MESSAGES)), f"seed {seed}"
    # ... applied in offset order within each partition ...
    for partition in ("p0", "p1"):
        offsets = [off for _, p, off in rows if p == partition]
        assert offsets == list(range(CRASH_MESSAGES // 2)), f"seed {seed}: {partition}: {offsets}"
    # ... and the group is done: nothing comes again.
    assert cursor_of(client, queue, "inbox", "p0") == cursor_of(client, queue, "inbox", "p1") == CRASH_MESSAGES // 2
    time.sleep(1.1)  # the last killed consumer's lease, if any, runs out
    assert client.pop(queue, group="inbox", batch=10, partitions=2, wait_ms=200).messages == []


def count_rows(database_url: str, table: str) -> int:
    with psycopg.connect(database_url) as conn:
        return int(conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0])  # type: ignore[index]


# Refusals and mistakes.


def test_refusals_raise_the_error_class_of_their_code(db: psycopg.Connection[Any], queue: str) -> None:
    with pytest.raises(queenside.InvalidArgumentError) as caught:
        push_tx(db, PushItem("no spaces allowed", 1))
    err = caught.value
    assert err.code == "invalid_argument" and not err.retryable
    assert str(err).startswith("invalid_argument: push item 0: queue 'no spaces allowed' must be")
    assert isinstance(err.__cause__, psycopg.Error)
    assert err.__cause__.sqlstate == "22023" and err.__cause__.diag.message_detail == "invalid_argument"
    assert db.info.transaction_status == psycopg.pq.TransactionStatus.INERROR  # the caller rolls back
    db.rollback()

    with pytest.raises(queenside.InvalidArgumentError, match="push item 1: headers must be"):
        push_tx(db, [PushItem(queue, 1), PushItem(queue, 2, headers={"n": 1})])  # type: ignore[dict-item]
    db.rollback()
    with pytest.raises(queenside.InvalidArgumentError, match="ack item 0: status 'done' must be"):
        ack_tx(db, [AckItem("1.2.00000000000000000000000000000000", offset=0, status="done")])
    db.rollback()

    # Push maintenance, set in this transaction only: unavailable.
    db.execute("UPDATE queenside.maintenance SET push = true, push_since = now()")
    with pytest.raises(queenside.UnavailableError) as unavailable:
        push_tx(db, PushItem(queue, 1))
    assert unavailable.value.retryable and unavailable.value.__cause__.sqlstate == "55000"  # type: ignore[union-attr]
    db.rollback()

    # Other database errors are the database's.
    with pytest.raises(psycopg.errors.UndefinedTable):
        db.execute("SELECT * FROM no_such_table")
    db.rollback()


def test_items_of_several_queues_answer_in_their_order(db: psycopg.Connection[Any], queue: str) -> None:
    # A statement a queue; the results come back in the items' order.
    queues = [f"{queue}-a", f"{queue}-b", f"{queue}-a", f"{queue}-c", f"{queue}-b", f"{queue}-a"]
    items = [PushItem(q, i, partition="p", headers={"i": str(i)}) for i, q in enumerate(queues)]
    items[5] = PushItem(queues[5], 5, partition="p", transaction_id="same")
    items.append(PushItem(queues[0], 6, partition="p", transaction_id="same"))
    with db.transaction():
        results = push_tx(db, items)
    got = [(r.index, r.queue, r.partition, r.offset, r.status) for r in results]
    want_offsets = [0, 0, 1, 0, 1, 2, 2]
    assert got == [(i, item.queue, "p", want_offsets[i], "duplicate" if i == 6 else "queued") for i, item in enumerate(items)]
    assert results[6].message_id == results[5].message_id


def test_a_refusal_names_the_item_of_its_statement(db: psycopg.Connection[Any], queue: str) -> None:
    big = b"\xc4" * (16 << 20)
    with pytest.raises(queenside.InvalidArgumentError, match=r"^invalid_argument: push item 2: .*--max-frame-bytes"):
        push_tx(db, [PushItem(f"{queue}-a", 1), PushItem(f"{queue}-b", 2), PushItem(f"{queue}-a", big)])
    db.rollback()


def test_items_are_checked_before_any_statement(db: psycopg.Connection[Any], queue: str) -> None:
    idle = psycopg.pq.TransactionStatus.IDLE
    with pytest.raises(queenside.InvalidArgumentError, match="push item 1: payload is required"):
        push_tx(db, [PushItem(queue, 1), PushItem(queue)])
    with pytest.raises(queenside.InvalidArgumentError, match="push item 0: queue is required"):
        push_tx(db, {"payload": 1})
    with pytest.raises(TypeError, match="unknown key 'txid'"):
        push_tx(db, {"queue": queue, "payload": 1, "txid": "x"})
    with pytest.raises(TypeError):
        ack_tx(db, [{"leaseId": "x", "offset": 0}])  # type: ignore[list-item]
    assert db.info.transaction_status == idle  # nothing was sent
    # No items: refused as the sidecar refuses a push or an ack without any.
    with pytest.raises(queenside.InvalidArgumentError, match="items: must hold at least one item"):
        push_tx(db, [])
    with pytest.raises(queenside.InvalidArgumentError, match="items: must hold at least one item"):
        ack_tx(db, [])
    assert db.info.transaction_status == idle


def test_sync_and_async_helpers_refuse_the_other_kind(database_url: str, db: psycopg.Connection[Any], queue: str) -> None:
    with pytest.raises(TypeError, match="push_tx_async takes a psycopg AsyncConnection"):
        asyncio.run(push_tx_async(db, PushItem(queue, 1)))

    async def sync_helper_on_async() -> None:
        async with await psycopg.AsyncConnection.connect(database_url) as aconn:
            with pytest.raises(TypeError, match="ack_tx takes a psycopg Connection"):
                ack_tx(aconn, [])

    asyncio.run(sync_helper_on_async())
    assert db.info.transaction_status == psycopg.pq.TransactionStatus.IDLE


# asyncio.


def test_async_outbox_and_inbox(client: Client, database_url: str, queue: str, app_tables: None) -> None:
    async def main() -> None:
        async with await psycopg.AsyncConnection.connect(database_url) as aconn:
            async with aconn.transaction():
                await aconn.execute("INSERT INTO app_orders VALUES (%s, 7)", (queue,))
                results = await push_tx_async(aconn, [PushItem(queue, "a"), PushItem(queue, "b")])
            assert [(r.status, r.offset) for r in results] == [("queued", 0), ("queued", 1)]

            async with queenside.AsyncClient(client.socket_path) as qs:
                batch = await qs.pop(queue, group="g", batch=2)
            assert [m.payload for m in batch.messages] == ["a", "b"]
            async with aconn.transaction():
                async with aconn.cursor() as cur:
                    await cur.execute("INSERT INTO app_effects VALUES (%s, %s)", (queue, 0))
                    res = await ack_tx_async(cur, [batch.messages[0]])
                raise psycopg.Rollback()
            assert res.all_succeeded
            assert cursor_of(client, queue, "g") == 0
            async with aconn.transaction():
                await aconn.execute("INSERT INTO app_effects VALUES (%s, %s)", (queue, 0))
                res = await ack_tx_async(aconn, batch.messages)
            assert [r.success for r in res.results] == [True, True]
            assert cursor_of(client, queue, "g") == 2
            with pytest.raises(queenside.InvalidArgumentError):
                await push_tx_async(aconn, PushItem("bad queue", 1))
            await aconn.rollback()

    asyncio.run(main())


def test_trace_id_is_stored(client: Client, db: psycopg.Connection[Any], queue: str) -> None:
    with db.transaction():
        push_tx(db, {"queue": queue, "payload": 1, "traceId": "trace-1"})
    assert client.pop(queue, auto_ack=True).messages[0].trace_id == "trace-1"


def test_the_client_does_not_import_psycopg() -> None:
    src = str(REPO / "clients" / "python" / "src")
    code = "import sys, queenside; queenside.push_tx; sys.exit('psycopg' in sys.modules)"
    env = {**os.environ, "PYTHONPATH": src}
    assert subprocess.run([sys.executable, "-c", code], env=env).returncode == 0
