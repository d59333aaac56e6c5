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
from .ack_batcher import AckError
from .async_consumer import AsyncConsumer
from .client import Client
from .codec import Raw
from .consume_batch import ConsumeStats
from .consumer import Consumer
from .errors import (
    BadRequestError,
    ConflictError,
    ConnectionClosedError,
    DeadlineExceededError,
    DrainingError,
    FrameTooLargeError,
    InternalError,
    InvalidArgumentError,
    LeaseExpiredError,
    NotFoundError,
    OverloadedError,
    QueensideError,
    SpoolFullError,
    UnauthorizedError,
    KeyMissingError,
    UnavailableError,
    UnknownOpError,
    UnsupportedError,
)
from .items import COMPLETED, FAILED, AckItem, PushItem, QueueOptions
from .results import (
    BUFFERED,
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
from .socket_path import DEFAULT_SOCKET, DEV_SOCKET, default_socket_path
from .txid import transaction_id
from .version import __version__

__all__ = [
    "Client",
    "AsyncClient",
    "Consumer",
    "AsyncConsumer",
    "ConsumeStats",
    "AckError",
    "PushItem",
    "AckItem",
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
    "HealthResult",
    "DatabaseHealth",
    "SpoolHealth",
    "QueensideError",
    "BadRequestError",
    "FrameTooLargeError",
    "UnknownOpError",
    "UnsupportedError",
    "InvalidArgumentError",
    "NotFoundError",
    "ConflictError",
    "LeaseExpiredError",
    "UnavailableError",
    "SpoolFullError",
    "DrainingError",
    "OverloadedError",
    "DeadlineExceededError",
    "UnauthorizedError",
    "KeyMissingError",
    "InternalError",
    "ConnectionClosedError",
    "transaction_id",
    "default_socket_path",
    "DEFAULT_SOCKET",
    "DEV_SOCKET",
    "QUEUED",
    "DUPLICATE",
    "BUFFERED",
    "COMPLETED",
    "FAILED",
    "__version__",
]
