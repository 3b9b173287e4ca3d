"""User-facing errors: one line that says what is wrong, the value, and how to fix it."""

from __future__ import annotations

import signal
from typing import ClassVar


class GhostifyError(Exception):
    """An error caused by the user's input; the CLI prints it as one line and exits non-zero."""

    exit_code = 2


class CheckpointError(GhostifyError):
    """A checkpoint is missing, corrupt or inconsistent with its ghostify record."""


class UnsupportedModelError(GhostifyError):
    """The model's architecture has no ghostify adapter."""


class DataError(GhostifyError):
    """A dataset, task or column is missing or unusable."""


class Terminated(BaseException):
    """SIGINT, SIGTERM or SIGHUP arrived: raised in the main thread while the CLI runs (not an
    Exception, so no ``except Exception`` swallows it, and not KeyboardInterrupt, which Typer turns
    into a silent exit), so that temporary directories are removed and training's ``finally``
    blocks run before the CLI exits with one line and 128 + the signal."""

    #: the first such signal of this run, kept even where a library swallows the exception (torch's
    #: ONNX exporter catches broadly): writes check it before their final rename
    arrived: ClassVar[int | None] = None

    def __init__(self, signum: int):
        self.signum = signum
        self.name = signal.Signals(signum).name
        super().__init__(self.message)

    @property
    def message(self) -> str:
        return "interrupted" if self.signum == signal.SIGINT else f"terminated by {self.name}"

    @classmethod
    def raise_if_arrived(cls) -> None:
        """Raise now if a signal arrived whose exception some library caught and dropped."""
        if cls.arrived is not None:
            raise cls(cls.arrived)
