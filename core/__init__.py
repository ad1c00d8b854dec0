"""ztq.core: the library applications import to define and enqueue tasks.

This module is the public API (``from ztq.core import task, connect, ...``): it re-exports
the names applications use from the packages below, one per concern (``client``,
``engine``, ``middleware``, ``messaging``, ``monitor``, ``alerts``, ``auth``, ``contrib``,
``settings``; docs/architecture.md). ``errors`` and ``states`` sit at the bottom, for all.

May import: its own packages. Never ``ztq.worker``, ``ztq.console`` or the ``ztq`` command;
no module below imports this one (they import the module that defines a name).
"""

from ztq.core.client.app import (
    App,
    add_cron,
    configure_queue,
    connect,
    cron_entries,
    default_app,
    disconnect_all,
    get_storage,
    lookup,
    registered,
    remove_cron,
    subscribe_task,
    task,
    use_transaction_manager,
)
from ztq.core.client.apps import load_app
from ztq.core.client.batch import Batch, BatchStatus, batch
from ztq.core.client.calls import TaskCall, task_id_for
from ztq.core.client.cron import CronTable
from ztq.core.client.handle import TaskHandle, ping
from ztq.core.client.registry import TaskFunction
from ztq.core.client.transaction import DataManager, transaction
from ztq.core.engine.record import TaskRecord
from ztq.core.engine.storage import Storage
from ztq.core.errors import (
    ChannelFull,
    ConfigError,
    ConnectionFailed,
    InvalidName,
    InvalidOption,
    NotFound,
    PayloadError,
    QueueFull,
    RedisFull,
    RedisNotReady,
    RedisReadOnly,
    RedisUnreachable,
    ResultTimeout,
    Retry,
    SerializationError,
    StaleLease,
    TaskExpired,
    TaskFailed,
    TransferFailed,
    UnknownTask,
    UnsupportedTask,
    ZtqError,
)
from ztq.core.messaging.broadcast import BroadcastHandle, BroadcastRun, broadcast_handle
from ztq.core.messaging.channels import Channel, Message, Subscriber, channel
from ztq.core.messaging.files import (
    FileReceiver,
    ReceivedFile,
    SentFile,
    publish_file,
    receive_file,
)
from ztq.core.states import Priority, TaskState

__all__ = [
    "App",
    "Batch",
    "BatchStatus",
    "BroadcastHandle",
    "BroadcastRun",
    "Channel",
    "ChannelFull",
    "QueueFull",
    "RedisFull",
    "RedisNotReady",
    "RedisReadOnly",
    "RedisUnreachable",
    "ConfigError",
    "ConnectionFailed",
    "CronTable",
    "DataManager",
    "FileReceiver",
    "InvalidName",
    "InvalidOption",
    "Message",
    "NotFound",
    "PayloadError",
    "ResultTimeout",
    "Priority",
    "Retry",
    "ReceivedFile",
    "SentFile",
    "SerializationError",
    "StaleLease",
    "Subscriber",
    "TaskExpired",
    "TaskFailed",
    "Storage",
    "TaskCall",
    "TaskFunction",
    "TaskHandle",
    "TaskRecord",
    "TaskState",
    "TransferFailed",
    "UnknownTask",
    "UnsupportedTask",
    "ZtqError",
    "add_cron",
    "batch",
    "broadcast_handle",
    "channel",
    "configure_queue",
    "connect",
    "cron_entries",
    "default_app",
    "disconnect_all",
    "get_storage",
    "load_app",
    "lookup",
    "ping",
    "publish_file",
    "receive_file",
    "registered",
    "remove_cron",
    "subscribe_task",
    "task",
    "task_id_for",
    "transaction",
    "use_transaction_manager",
]
