"""Batches (批次, docs/batches.md): the list with a progress bar each, one batch with its
members' states page by page, and the redo of a batch's failed members. Reads and the redo
go through ``ztq.core.monitor.batches``, which ``ztq batch`` shares."""

from __future__ import annotations

from typing import Any

from pyramid.view import view_config

from ztq.console.security import OPERATE
from ztq.console.web import audit, back, flash, int_param, not_found, text_param
from ztq.core.errors import NotFound
from ztq.core.monitor import batches

PAGE = batches.PAGE


@view_config(route_name="batches", request_method="GET", renderer="batches.jinja2")
def batches_page(request: Any) -> dict[str, Any]:
    offset = int_param(request, "offset", 0, 0, 10**9)
    return batches.batch_list(request.storage, offset, PAGE)


@view_config(route_name="batch", request_method="GET", renderer="batch.jinja2")
def batch_page(request: Any) -> dict[str, Any]:
    batch_id = request.matchdict["id"]
    offset = int_param(request, "offset", 0, 0, 10**9)
    try:
        data = batches.batch_page(request.storage, batch_id, offset, PAGE)
    except NotFound:
        raise not_found(request.t("No batch {id}: never made, or expired.", id=batch_id)) from None
    return {"batch": data, "page_size": PAGE}


@view_config(route_name="batch_redo", request_method="POST", permission=OPERATE)
def batch_redo(request: Any) -> Any:
    """Put the batch's failed members back to run, audited per queue."""
    batch_id = text_param(request, "batch", 64)

    def note(queue: str, n: int) -> None:
        audit(request, "redo batch", queue=queue, count=n, detail=f"batch {batch_id}")

    try:
        moved = batches.redo_failed(request.storage, batch_id, note)
    except NotFound:
        raise not_found(request.t("No batch {id}: never made, or expired.", id=batch_id)) from None
    flash(
        request, request.t("{n} failed members back to run.", n=moved), "ok" if moved else "error"
    )
    return back(request, request.route_path("batch", id=batch_id))
