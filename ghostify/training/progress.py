"""What a training run shows while it runs, on the main process only.

On a terminal: a bar with the loss, the learning rate and the time left, and a bar of its own while
evaluating. Without one (CI, ``nohup``, ``| tee``): a line every tenth of the run or every minute,
whichever comes first (``step 120/630 (19%) loss 0.412 lr 1.6e-05 32.1 samples/s ETA 4m12s``).
Both print one line per evaluation (``eval step 315: accuracy 0.842 (best)``).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from typing import Any

from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.progress import Progress as Bar

from ..console import err

#: a line at least this often without a terminal
LINE_SECONDS = 60.0
#: and at least every this fraction of the run
LINE_FRACTION = 0.1


class Interval:
    """Due once ``steps`` steps or ``seconds`` seconds have passed since it was last due, whichever
    comes first (``clock``: seconds, replaceable by a fake one in tests)."""

    def __init__(self, steps: int, seconds: float, *, start: int = 0, clock: Callable[[], float] = time.monotonic):
        self.steps, self.seconds, self.clock = max(1, steps), seconds, clock
        self.last_step, self.last_time = start, clock()

    def due(self, step: int) -> bool:
        now = self.clock()
        if step - self.last_step >= self.steps or now - self.last_time >= self.seconds:
            self.last_step, self.last_time = step, now
            return True
        return False


def duration(seconds: float) -> str:
    """``4m12s``, ``1h05m``, ``35s``."""
    seconds = max(0, round(seconds))
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    if seconds >= 60:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds}s"


class TrainingProgress:
    """Progress of one run from ``done`` to ``total`` optimizer steps of ``batch_size`` examples each.
    ``enabled=False`` (the other processes of a launch) shows nothing."""

    def __init__(self, describe: str, total: int, done: int, batch_size: int, *, enabled: bool = True,
                 terminal: bool | None = None, clock: Callable[[], float] = time.monotonic,
                 write: Callable[[str], None] | None = None):
        self.describe, self.total, self.batch_size, self.clock = describe, total, batch_size, clock
        self.enabled = enabled
        self.terminal = err.is_terminal if terminal is None else terminal
        self.write = write or (lambda line: err.print(line, markup=False))
        self.started, self.first = clock(), done
        self.losses: list[float] = []  # since the last line (this process's, for display only)
        self.interval = Interval(math.ceil(total * LINE_FRACTION), LINE_SECONDS, start=done, clock=clock)
        self.bar: Bar | None = None
        if enabled and self.terminal:
            self.bar = Bar(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                           TextColumn("{task.fields[status]}"), TimeElapsedColumn(), TimeRemainingColumn(),
                           console=err, transient=True)
            self.task = self.bar.add_task(describe, total=total, completed=done, status="")
            self.bar.start()

    def step(self, step: int, loss: float, learning_rate: float) -> None:
        """After optimizer step ``step`` (1-based), whose micro-batches had mean ``loss``."""
        if not self.enabled:
            return
        self.losses.append(loss)
        if self.bar is not None:
            self.bar.update(self.task, completed=step, status=f"loss {loss:.3g} lr {learning_rate:.2g}")
        elif self.interval.due(step) or step == self.total:
            self.write(self.line(step, learning_rate))

    def line(self, step: int, learning_rate: float) -> str:
        loss = sum(self.losses) / len(self.losses) if self.losses else float("nan")
        self.losses.clear()
        elapsed, steps = self.clock() - self.started, step - self.first
        speed = f" {steps * self.batch_size / elapsed:.1f} samples/s" if elapsed > 0 and steps > 0 else ""
        eta = f" ETA {duration((self.total - step) * elapsed / steps)}" if steps > 0 else ""
        percent = 100 * step // self.total if self.total else 100
        return f"step {step}/{self.total} ({percent}%) loss {loss:.3g} lr {learning_rate:.2g}{speed}{eta}"

    def evaluating(self, loader: Any) -> Any:
        """``loader``, advancing an evaluation bar batch by batch on a terminal."""
        if self.bar is None:
            return loader
        return _Counted(loader, self.bar)

    def evaluated(self, step: int, metrics: dict[str, float], select: str, best: bool) -> None:
        if not self.enabled:
            return
        shown = [f"{select} {metrics[select]:.4g}"]
        shown += [f"{k} {v:.4g}" for k, v in metrics.items() if k not in (select, "samples") and isinstance(v, float)]
        self.write(f"eval step {step}: {', '.join(shown)}{' (best)' if best else ''}")

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()
            self.bar = None


class _Counted:
    """An evaluation loader whose batches advance a bar (removed when the pass ends)."""

    def __init__(self, loader: Any, bar: Bar):
        self.loader, self.bar = loader, bar

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self) -> Iterator[Any]:
        task = self.bar.add_task("evaluating", total=len(self.loader), status="")
        try:
            for batch in self.loader:
                yield batch
                self.bar.advance(task)
        finally:
            self.bar.remove_task(task)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.loader, name)


__all__ = ["Interval", "TrainingProgress", "duration"]
