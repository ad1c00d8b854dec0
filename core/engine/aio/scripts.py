"""The Lua scripts run from ``redis.asyncio``: the same scripts, twins and reloads as the
blocking side (``ztq.core.engine.scripts``), awaited."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from redis.exceptions import ResponseError

from ztq.core.engine.fault_kinds import FULL, took
from ztq.core.engine.scripts import SCRIPTS, Op, missing_script, raise_first


async def acall_many(
    client: Any, ops: Sequence[Op], *, wait: tuple[int, int] | None = None
) -> list[Any]:
    """:meth:`Scripts.call_many` on a ``redis.asyncio`` client (the async pools' and
    producers' path): a pipeline of EVALSHAs, a full Redis's refused calls sent again as
    their allow-oom twins, the scripts loaded again after NOSCRIPT."""
    if not ops:
        return []
    for attempt in (1, 2):
        replies = list(await SCRIPTS.pipeline(client, ops, wait).execute(raise_on_error=False))
        refused, twins = SCRIPTS.twins(client, ops, replies)
        if twins is not None:
            again = await twins.execute(raise_on_error=False)
            FULL.refused(took(refused, replies, again))
        try:
            return raise_first(ops, replies)
        except ResponseError as exc:
            if attempt == 2 or not missing_script(exc):
                raise
            for src in SCRIPTS.source.values():
                await client.script_load(src)
    raise AssertionError("unreachable")
