"""The Typer application and the entry point that turns known errors into one line."""

from __future__ import annotations

import logging
import os
import sys
import warnings

import typer

from ..errors import GhostifyError

app = typer.Typer(
    name="ghostify",
    help="Compress Hugging Face encoders with the GhostBERT recipe: importance, prune, attach-ghost, "
    "distill, finetune; each command reads a checkpoint and writes a new one.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="markdown",
)

DEBUG_VARIABLE = "GHOSTIFY_DEBUG"


def _one_line_warning(message, category, filename, lineno, file=None, line=None) -> None:
    text = str(message).strip().splitlines()[0] if str(message).strip() else category.__name__
    print(f"warning: {text}", file=sys.stderr)


def _quiet_libraries() -> None:
    """Library chatter (transformers' per-weight notices, datasets' bars) hides ghostify's own
    messages; users can still ask for it with TRANSFORMERS_VERBOSITY."""
    if "TRANSFORMERS_VERBOSITY" not in os.environ:
        from transformers.utils import logging as hf_logging

        hf_logging.set_verbosity_error()
        hf_logging.disable_progress_bar()
        logging.getLogger("huggingface_hub").setLevel(logging.ERROR)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; a known error becomes ``error: ...`` on stderr and exit code 2."""
    from . import commands  # noqa: F401  (registers the commands)

    debug = bool(os.environ.get(DEBUG_VARIABLE))
    _quiet_libraries()
    with warnings.catch_warnings():
        warnings.simplefilter("always", UserWarning)  # each run says its warnings, once per call
        if not debug:
            warnings.showwarning = _one_line_warning
        return _run(argv, debug)


def _run(argv: list[str] | None, debug: bool) -> int:
    try:
        result = app(args=argv, prog_name="ghostify", standalone_mode=False)
        return int(result or 0) if isinstance(result, int) else 0
    except GhostifyError as exc:
        if debug:
            raise
        for line in str(exc).splitlines() or [type(exc).__name__]:
            print(f"error: {line}", file=sys.stderr)  # a recipe reports all its problems, one per line
        return exc.exit_code
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        if debug:
            raise
        if _is_usage_error(exc):
            ctx = getattr(exc, "ctx", None)
            hint = f" (see `{ctx.command_path} --help`)" if ctx is not None else " (see `ghostify --help`)"
            print(f"error: {exc.format_message()}{hint}", file=sys.stderr)
            return int(exc.exit_code)
        if type(exc).__name__ == "Abort":
            print("error: aborted", file=sys.stderr)
            return 130
        text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        print(
            f"error: unexpected {type(exc).__name__}: {text} (set {DEBUG_VARIABLE}=1 for the traceback)",
            file=sys.stderr,
        )
        return 1


def _is_usage_error(exc: Exception) -> bool:
    """Typer's command-line parsing errors (bad option, missing argument, invalid value).

    Typer re-exports only some of them (``typer.BadParameter``), so recognise the family by its
    interface: a message formatter and an exit code."""
    return hasattr(exc, "format_message") and isinstance(getattr(exc, "exit_code", None), int)


def run() -> None:
    sys.exit(main())
