"""Files through a channel: one sender, every subscriber gets the whole file (Redis in
Action 6.6, distributing files through Redis).

:func:`publish_file` sends a file as a ``file-begin`` message (name, size, chunk size), its
chunks in order (``file-chunk``: offset and bytes) and a ``file-end`` message (size and
SHA-256). A channel holds at most ``window`` chunks that some subscriber has not
acknowledged, so Redis never holds more than ``window`` × ``chunk_size`` of a file however
slow a subscriber is: the sender waits for room. Chunks leave Redis as soon as every
subscriber acknowledged them.

:class:`FileReceiver` rebuilds the files in a folder. Each chunk is written at its offset
in ``.ztq-<file>.part`` before it is acknowledged, so a receiver killed at any instant
resumes where it stopped: the chunks delivered again after a restart that the part file
already holds are skipped, a chunk cut short by the kill is written again, and the end
message checks the size and the SHA-256 of what arrived before the file takes its name.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ztq.core.errors import InvalidOption, ResultTimeout, TransferFailed
from ztq.core.messaging.channels import Channel, Message, Subscriber

if TYPE_CHECKING:
    from ztq.core.client.app import App

log = logging.getLogger(__name__)

CHUNK_SIZE = 512 * 1024
WINDOW = 16  # chunks in Redis at once, at most
_SAFE_NAME = re.compile(r"[^A-Za-z0-9_.\-]")


@dataclass(frozen=True)
class SentFile:
    """What :func:`publish_file` sent; ``delivered`` is False when the channel had no
    subscriber (nothing was sent)."""

    file: str
    name: str
    size: int
    sha256: str
    chunks: int
    delivered: bool = True


@dataclass(frozen=True)
class ReceivedFile:
    """A file a :class:`FileReceiver` rebuilt. ``ok``: size and SHA-256 match what the
    sender announced (``path`` is then the file; else ``error`` says what differs and
    ``path`` is the part kept as ``<name>.failed``). ``duplicates``: chunks delivered again
    (after a restart) and skipped."""

    file: str
    name: str
    path: Path
    size: int
    sha256: str
    ok: bool
    error: str = ""
    duplicates: int = 0


def publish_file(
    channel: str | Channel,
    path: str | os.PathLike[str],
    *,
    name: str | None = None,
    chunk_size: int = CHUNK_SIZE,
    window: int = WINDOW,
    timeout: float = 60.0,
    app: App | None = None,
    connection: str = "default",
) -> SentFile:
    """Send the file at ``path`` to every subscriber of ``channel`` (as ``name``, default
    its base name). The sender waits while ``window`` chunks are in Redis, each time up to
    ``timeout`` seconds (then :class:`~ztq.core.errors.ChannelFull`: a subscriber stopped
    reading). Returns the file's id, size and SHA-256."""
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
        raise InvalidOption(f"chunk_size must be an int >= 1, not {chunk_size!r}")
    if isinstance(window, bool) or not isinstance(window, int) or window < 1:
        raise InvalidOption(f"window must be an int >= 1, not {window!r}")
    ch = (
        channel
        if isinstance(channel, Channel)
        else Channel(channel, app=app, connection=connection)
    )
    source = Path(path)
    size = source.stat().st_size
    file_id = uuid.uuid4().hex
    shown = name or source.name
    chunks = -(-size // chunk_size)
    begin = {"name": shown, "size": size, "chunk": chunk_size, "chunks": chunks}

    def send(fields: list[bytes]) -> str | None:
        return ch.publish_fields(fields, timeout=timeout, cap=window)

    head = [b"k", b"fb", b"f", file_id.encode(), b"d", json.dumps(begin).encode()]
    if send(head) is None:
        return SentFile(file_id, shown, size, "", chunks, delivered=False)
    digest = hashlib.sha256()
    offset = 0
    with source.open("rb") as f:
        while block := f.read(chunk_size):
            digest.update(block)
            fields = [b"k", b"fc", b"f", file_id.encode(), b"o", str(offset).encode(), b"d", block]
            if send(fields) is None:  # every subscriber left meanwhile: nobody to send to
                return SentFile(file_id, shown, size, "", chunks, delivered=False)
            offset += len(block)
    if offset != size:
        raise TransferFailed(f"{source} changed while it was sent ({size} then {offset} bytes)")
    sha = digest.hexdigest()
    end = {"size": size, "sha256": sha}
    send([b"k", b"fe", b"f", file_id.encode(), b"d", json.dumps(end).encode()])
    return SentFile(file_id, shown, size, sha, chunks)


class FileReceiver:
    """Rebuilds the files of a channel in ``folder``: give it every message in order
    (:meth:`feed`), acknowledge each after it returned. ``on_chunk(offset, length, fresh)``
    is told of each chunk (``fresh``: written now, not a duplicate)."""

    def __init__(
        self,
        folder: str | os.PathLike[str],
        on_chunk: Callable[[int, int, bool], None] | None = None,
    ) -> None:
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.on_chunk = on_chunk
        self.duplicates: dict[str, int] = {}

    def _part(self, file_id: str) -> Path:
        return self.folder / f".ztq-{file_id}.part"

    def _meta(self, file_id: str) -> Path:
        return self.folder / f".ztq-{file_id}.json"

    def feed(self, msg: Message) -> ReceivedFile | None:
        """Apply one message; returns the file when ``msg`` ended one. Safe to give the same
        message again (a redelivery after a restart). Messages that are not file parts, and
        parts of a file whose beginning this receiver never saw, are skipped."""
        if not msg.kind.startswith("file-") or not re.fullmatch(r"[0-9a-f]{32}", msg.file):
            log.warning("%s: message %s is not part of a file: skipped", self.folder, msg.id)
            return None
        meta, part = self._meta(msg.file), self._part(msg.file)
        if msg.kind == "file-begin":
            if not meta.exists():
                part.write_bytes(b"")
                tmp = meta.with_suffix(".tmp")
                tmp.write_text(json.dumps(msg.data))
                tmp.replace(meta)  # the part exists before the meta says the file began
            return None
        if not meta.exists():
            log.warning(
                "%s: part of file %s whose beginning was not received", self.folder, msg.file
            )
            return None
        if msg.kind == "file-chunk":
            self._chunk(msg, part)
            return None
        return self._end(msg, json.loads(meta.read_text()), meta, part)

    def _chunk(self, msg: Message, part: Path) -> None:
        data: bytes = msg.data
        have = part.stat().st_size
        if msg.offset + len(data) <= have:  # written before a restart: a redelivery
            self.duplicates[msg.file] = self.duplicates.get(msg.file, 0) + 1
            if self.on_chunk:
                self.on_chunk(msg.offset, len(data), False)
            return
        if msg.offset > have:
            raise TransferFailed(
                f"file {msg.file}: chunk at {msg.offset} arrived, but only {have} bytes before it"
            )
        with part.open("r+b") as f:  # at its offset: a chunk cut short by a kill is redone
            f.seek(msg.offset)
            f.truncate()
            f.write(data)
        if self.on_chunk:
            self.on_chunk(msg.offset, len(data), True)

    def _end(self, msg: Message, begin: dict[str, object], meta: Path, part: Path) -> ReceivedFile:
        want = msg.data if isinstance(msg.data, dict) else {}
        size = part.stat().st_size
        digest = hashlib.sha256()
        with part.open("rb") as f:
            while block := f.read(1 << 20):
                digest.update(block)
        sha = digest.hexdigest()
        name = _SAFE_NAME.sub("_", os.path.basename(str(begin.get("name") or msg.file))) or msg.file
        error = ""
        if size != want.get("size"):
            error = f"{size} bytes arrived, {want.get('size')} were sent"
        elif sha != want.get("sha256"):
            error = f"SHA-256 {sha} differs from the sender's {want.get('sha256')}"
        target = self.folder / (name if not error else f"{name}.failed")
        part.replace(target)
        meta.unlink()
        return ReceivedFile(msg.file, name, target, size, sha, not error, error,
                            self.duplicates.pop(msg.file, 0))  # fmt: skip


def receive_file(
    subscriber: Subscriber,
    folder: str | os.PathLike[str],
    *,
    timeout: float = 60.0,
    receiver: FileReceiver | None = None,
) -> ReceivedFile:
    """Read ``subscriber``'s messages into ``folder`` until a file is complete; returns it
    (:class:`~ztq.core.errors.TransferFailed` when its size or hash differ). Each message
    is acknowledged once applied; ``timeout`` bounds the wait for the next message."""
    receiver = receiver or FileReceiver(folder)
    while True:
        deadline = time.monotonic() + timeout
        batch: list[Message] = []
        while not batch:
            left = deadline - time.monotonic()
            if left <= 0:
                raise ResultTimeout(
                    f"no message on channel {subscriber.channel.name} for {timeout}s"
                )
            batch = subscriber.read(count=WINDOW, block=left)
        for i, msg in enumerate(batch):
            done = receiver.feed(msg)
            subscriber.ack(msg)
            if done is not None:
                if i + 1 < len(batch):  # read but not applied: the next read gives them
                    subscriber.reread_after(msg.id)
                if not done.ok:
                    raise TransferFailed(f"file {done.name} ({done.file}): {done.error}")
                return done
