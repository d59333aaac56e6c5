"""queenside: the Python client of the queenside sidecar.

Apps talk to the sidecar over its Unix socket; it runs push, lease, ack and
transaction operations against PostgreSQL. Start with ``Client`` (threads)
or ``AsyncClient`` (asyncio), and ``Client.consume`` for a worker loop.
"""

from .admin_results import (
    CursorPosition,
    DatabaseHealth,
    DLQEntry,
    DLQPage,
    DLQReplayResult,
    GroupInfo,
    GroupStats,
    HealthResult,
    HelloResult,
    PartitionStats,
    QueueInfo,
    SpoolHealth,
    StatsResult,
)
from .async_client import AsyncClient
from .dlq_bulk import DLQDeleteReply, DLQErrorCount, DLQFilter, DLQReplayReply
from .ack_batcher import AckError
from .async_consumer import AsyncConsumer
from .client import Client
from .codec import Raw
from .consume_batch import DEFAULT_FAILURE_BACKOFF, Backoff, ConsumeStats
from .consumer import Consumer
# Every error class, one per code of the generated table (_codes.py) and
# ConnectionClosedError; __all__ below takes errors.__all__ whole, so a
# class cannot go unexported.
from . import errors as _errors
from .errors import *  # noqa: F401,F403
from .acks import completed, failed
from .items import COMPLETED, FAILED, AckItem, PushItem, QueueOptions
from .results import (
    ACK_ITEM_CODES,
    ALREADY_ACKED,
    BUFFERED,
    LEASE_EXPIRED,
    NOT_IN_LEASE,
    REWOUND,
    UNAVAILABLE,
    UNRESOLVABLE,
    DUPLICATE,
    QUEUED,
    AckItemResult,
    AckLeaseState,
    AckResult,
    Lease,
    LeaseResult,
    Message,
    PopResult,
    PushResult,
    TransactionResult,
)
from .retry import DEFAULT_RETRY, RetryPolicy
from .socket_path import DEFAULT_SOCKET, DEV_SOCKET, default_socket_path
from .txid import transaction_id
from .tx import ack_tx, ack_tx_async, push_tx, push_tx_async
from .version import __version__

__all__ = [
    "Client",
    "AsyncClient",
    "Consumer",
    "AsyncConsumer",
    "ConsumeStats",
    "Backoff",
    "DEFAULT_FAILURE_BACKOFF",
    "AckError",
    "PushItem",
    "AckItem",
    "completed",
    "failed",
    "RetryPolicy",
    "DEFAULT_RETRY",
    "QueueOptions",
    "Raw",
    "PushResult",
    "Message",
    "Lease",
    "PopResult",
    "AckItemResult",
    "AckLeaseState",
    "AckResult",
    "LeaseResult",
    "TransactionResult",
    "HelloResult",
    "QueueInfo",
    "StatsResult",
    "PartitionStats",
    "GroupStats",
    "GroupInfo",
    "CursorPosition",
    "DLQEntry",
    "DLQPage",
    "DLQReplayResult",
    "DLQFilter",
    "DLQReplayReply",
    "DLQDeleteReply",
    "DLQErrorCount",
    "HealthResult",
    "DatabaseHealth",
    "SpoolHealth",
    "transaction_id",
    "push_tx",
    "ack_tx",
    "push_tx_async",
    "ack_tx_async",
    "default_socket_path",
    "DEFAULT_SOCKET",
    "DEV_SOCKET",
    "QUEUED",
    "DUPLICATE",
    "BUFFERED",
    "ALREADY_ACKED",
    "LEASE_EXPIRED",
    "NOT_IN_LEASE",
    "UNRESOLVABLE",
    "REWOUND",
    "UNAVAILABLE",
    "ACK_ITEM_CODES",
    "COMPLETED",
    "FAILED",
    "__version__",
    *(name for name in _errors.__all__ if name not in ("error_from_wire", "ERROR_CLASSES")),
]
