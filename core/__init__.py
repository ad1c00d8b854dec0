"""ztq.core: the library applications import to define and enqueue tasks."""

from ztq.core.app import (
    App,
    add_cron,
    configure_queue,
    cron_entries,
    default_app,
    load_app,
    lookup,
    registered,
    remove_cron,
    subscribe_task,
    task,
    use_transaction_manager,
)
from ztq.core.broadcast import BroadcastHandle, BroadcastRun, broadcast_handle
from ztq.core.calls import TaskCall, task_id_for
from ztq.core.channels import Channel, Message, Subscriber, channel
from ztq.core.connection import connect, disconnect_all, get_storage
from ztq.core.cron import CronTable
from ztq.core.errors import (
    ChannelFull,
    ConfigError,
    ConnectionFailed,
    InvalidName,
    InvalidOption,
    NotFound,
    PayloadError,
    QueueFull,
    ResultTimeout,
    Retry,
    SerializationError,
    StaleLease,
    TaskFailed,
    TransferFailed,
    UnknownTask,
    UnsupportedTask,
    ZtqError,
)
from ztq.core.files import FileReceiver, ReceivedFile, SentFile, publish_file, receive_file
from ztq.core.handle import TaskHandle, ping
from ztq.core.record import TaskRecord
from ztq.core.registry import TaskFunction
from ztq.core.states import Priority, TaskState
from ztq.core.storage import Storage
from ztq.core.transaction import DataManager, transaction

__all__ = [
    "App",
    "BroadcastHandle",
    "BroadcastRun",
    "Channel",
    "ChannelFull",
    "QueueFull",
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
