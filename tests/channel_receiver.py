"""A subscriber process of the channel tests: rebuilds the files of a channel in a folder.

    python -m tests.channel_receiver REDIS_URL CHANNEL SUBSCRIBER FOLDER

Prints one line per event, flushed, for the test to wait on: ``ready``, then per chunk
``chunk <offset> <length> fresh|dup``, and ``file <name> <size> <sha256> <ok> <duplicates>``
when a file is complete (then it exits).
"""

from __future__ import annotations

import sys

import ztq.core as ztq
from ztq.core.messaging.files import FileReceiver


def main(url: str, channel: str, name: str, folder: str) -> int:
    ztq.connect(url)
    sub = ztq.channel(channel).subscribe(name)

    def said(offset: int, length: int, fresh: bool) -> None:
        print(f"chunk {offset} {length} {'fresh' if fresh else 'dup'}", flush=True)

    print("ready", flush=True)
    got = ztq.receive_file(sub, folder, timeout=60, receiver=FileReceiver(folder, said))
    print(f"file {got.name} {got.size} {got.sha256} {got.ok} {got.duplicates}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:5]))
