"""Ctrl-C, SIGTERM and SIGHUP end a run the same way: cleaned up, one line, exit 128 + the signal.

Light on purpose (no torch, no typer): ``ghostify.cli`` installs the handling with it before its
heavy imports, so Ctrl-C while torch and transformers load says ``error: interrupted`` too.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Iterator

from ..errors import Terminated

#: signals that end a run: SIGINT (Ctrl-C), SIGTERM, SIGHUP
TERMINATING = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name))


def _raise_terminated(signum: int, frame) -> None:
    """Record the signal (a library may swallow the exception: writes check the record before
    their final rename) and raise :class:`Terminated` where the main thread is."""
    for other in TERMINATING:  # a second signal must not interrupt the clean-up the first started
        signal.signal(other, signal.SIG_IGN)
    if Terminated.arrived is None:
        Terminated.arrived = signum
    raise Terminated(signum)


@contextlib.contextmanager
def terminate_on_signals() -> Iterator[None]:
    """The terminating signals raise :class:`Terminated` in the main thread inside the block (their
    default would end the process at once, leaving temporary directories behind, and Typer turns
    KeyboardInterrupt into a silent exit 130); the previous handlers and a clear record come back
    afterwards (tests call the CLI in-process)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    Terminated.arrived = None
    previous = {signum: signal.signal(signum, _raise_terminated) for signum in TERMINATING}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)
        Terminated.arrived = None


@contextlib.contextmanager
def exit_on_signals() -> Iterator[None]:
    """Around the CLI's start-up imports: a terminating signal prints its one line and exits
    (SystemExit, so no traceback; nothing has been written yet)."""
    try:
        with terminate_on_signals():
            yield
            Terminated.raise_if_arrived()  # an import swallowed it
    except Terminated as exc:
        from ..console import is_main_process  # deferred: rich, which this light module does not load otherwise

        if is_main_process():  # under accelerate launch: once (the launcher terminates the others alike)
            print(f"error: {exc.message}", file=sys.stderr)
        raise SystemExit(128 + exc.signum) from None
