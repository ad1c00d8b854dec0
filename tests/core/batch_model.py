"""The batch side of the model-based test (docs/batches.md): one batch whose members are
some of the queue's ids. The queue model (``model.py``) lists the members' ends as the
queue's outbox holds them; :meth:`BatchModel.relay` applies them as ``batch.lua`` does."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class BatchModel:
    members: tuple[str, ...]
    applied: dict[str, tuple[str, int]] = field(default_factory=dict)  # id -> outcome, fence
    complete: bool = False
    success: bool = False

    @property
    def done(self) -> int:
        return sum(1 for o, _ in self.applied.values() if o == "done")

    @property
    def failed(self) -> int:
        return sum(1 for o, _ in self.applied.values() if o == "failed")

    def relay(self, ends: list[tuple[str, str, int]]) -> None:
        """Apply each end whose fence is larger than its member's last one (a replayed or
        stale end changes nothing); the batch completes, and succeeds, once each."""
        total = len(self.members)
        for task_id, outcome, fence in ends:
            if fence <= self.applied.get(task_id, ("", -1))[1]:
                continue
            self.applied[task_id] = (outcome, fence)
            if self.done + self.failed >= total:
                self.complete = True
            if self.done >= total:
                self.success = True
