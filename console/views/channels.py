"""Channels (频道): each channel's size in Redis and its subscribers with their lag, and the
last broadcasts sent to the workers of each queue (docs/channels.md)."""

from __future__ import annotations

from typing import Any

from pyramid.view import view_config

from ztq.console.web import logical_queues
from ztq.core.messaging.broadcast import FINAL, recent_broadcasts
from ztq.core.messaging.channels import channel_infos, channel_names

MOST_CHANNELS = 200  # channels one page shows (by name)
MOST_QUEUES = 100  # queues whose broadcasts it reads
BROADCASTS = 20  # the newest broadcasts it shows


@view_config(route_name="channels", request_method="GET", renderer="channels.jinja2")
def channels_page(request: Any) -> dict[str, Any]:
    storage = request.storage
    names = channel_names(storage)
    channels = channel_infos(storage, names[:MOST_CHANNELS])
    sent = recent_broadcasts(storage, logical_queues(request)[:MOST_QUEUES])[:BROADCASTS]
    for b in sent:
        states = [r.state for r in b["runs"]]
        b["meant"] = sum(r.expected for r in b["runs"])
        b["count"] = {s: states.count(s) for s in FINAL}
        b["waiting"] = sum(s not in FINAL for s in states)
    return {
        "channels": channels,
        "more": max(0, len(names) - MOST_CHANNELS),
        "subscribers": [(c.name, s) for c in channels for s in c.subscribers],
        "broadcasts": sent,
    }
