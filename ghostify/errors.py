"""User-facing errors: one line that says what is wrong, the value, and how to fix it."""

from __future__ import annotations

import signal


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
    """SIGTERM or SIGHUP arrived: raised in the main thread like KeyboardInterrupt (not an
    Exception, so no ``except Exception`` swallows it), so that temporary directories are
    removed and training's ``finally`` blocks run before the CLI exits with 128 + the signal."""

    def __init__(self, signum: int):
        self.signum = signum
        self.name = signal.Signals(signum).name
        super().__init__(f"terminated by {self.name}")
