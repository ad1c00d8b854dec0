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
    task,
    use_transaction_manager,
)
from ztq.core.calls import TaskCall, task_id_for
from ztq.core.connection import connect, disconnect_all, get_storage
from ztq.core.cron import CronTable
from ztq.core.errors import (
    ConfigError,
    ConnectionFailed,
    InvalidName,
    InvalidOption,
    NotFound,
    PayloadError,
    ResultTimeout,
    Retry,
    SerializationError,
    StaleLease,
    TaskFailed,
    UnknownTask,
    UnsupportedTask,
    ZtqError,
)
from ztq.core.handle import TaskHandle, ping
from ztq.core.record import TaskRecord
from ztq.core.registry import TaskFunction
from ztq.core.states import Priority, TaskState
from ztq.core.storage import Storage
from ztq.core.transaction import DataManager, transaction

__all__ = [
    "App",
    "ConfigError",
    "ConnectionFailed",
    "CronTable",
    "DataManager",
    "InvalidName",
    "InvalidOption",
    "NotFound",
    "PayloadError",
    "ResultTimeout",
    "Priority",
    "Retry",
    "SerializationError",
    "StaleLease",
    "TaskFailed",
    "Storage",
    "TaskCall",
    "TaskFunction",
    "TaskHandle",
    "TaskRecord",
    "TaskState",
    "UnknownTask",
    "UnsupportedTask",
    "ZtqError",
    "add_cron",
    "configure_queue",
    "connect",
    "cron_entries",
    "default_app",
    "disconnect_all",
    "get_storage",
    "load_app",
    "lookup",
    "ping",
    "registered",
    "remove_cron",
    "task",
    "task_id_for",
    "transaction",
    "use_transaction_manager",
]
