"""Where ghostify talks: a command's result (its JSON, or the table that is its answer: info,
eval, report) on stdout, so that it can be redirected; progress, notes and warnings on stderr.

Below the CLI, so that training's progress bar shares the CLI's stderr console without
importing the CLI. Under ``accelerate launch`` every process runs the command: only the main one
(global rank 0) talks, so that each line appears once."""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from .errors import GhostifyError



def is_main_process() -> bool:
    """True except in the processes of a multi-process launch other than the first (``RANK`` is set
    by ``accelerate launch`` and torchrun before the command starts)."""
    return os.environ.get("RANK", "0").strip() in ("0", "")


def launched_processes() -> int:
    """How many processes the launch started (``WORLD_SIZE``, which ``accelerate launch`` and torchrun set before
    the command starts; 1 when it is unset or empty). A value that is no whole number is refused in one line."""
    text = os.environ.get("WORLD_SIZE", "").strip()
    if not text:
        return 1
    try:
        return int(text)
    except ValueError:
        raise GhostifyError(f"WORLD_SIZE={text!r} is not a number of processes; unset it, or start the command with "
                            "accelerate launch or torchrun, which set it") from None


err = Console(stderr=True, highlight=False, soft_wrap=True, quiet=not is_main_process())  # never break paths across lines
out = Console(highlight=False, soft_wrap=True, quiet=not is_main_process())  # results: `ghostify info X > file` keeps them


def print_json(data: Any) -> None:
    if not is_main_process():
        return
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=False) + "\n")
    sys.stdout.flush()


def progress(description: str, total: int | None) -> Progress:
    """A progress bar on stderr (hidden when stderr is not a terminal)."""
    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=err,
        transient=True,
        disable=not err.is_terminal,
    )
