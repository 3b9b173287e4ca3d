"""The Typer application and the entry point that turns known errors into one line."""

from __future__ import annotations

import errno
import functools
import logging
import os
import re
import sys
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from typing import Annotated, Any

import typer

from ..console import is_main_process
from ..errors import GhostifyError, Terminated
from ..threads import set_cpu_defaults
from ..version import __version__
from .help import HelpCommand, HelpGroup
from .inputs import check_inputs, check_one_process

#: the commands that run under ``accelerate launch`` (every process its share); the others refuse a launch
LAUNCHED_COMMANDS = frozenset({"finetune", "distill", "eval", "run"})
from .signals import terminate_on_signals


class _Ghostify(typer.Typer):
    """Typer whose commands check what they name (``inputs.py``) and quiet the libraries when they
    start: importing transformers for that up front would cost ``ghostify --help`` a second or more."""

    def command(self, *args: Any, **kwargs: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        kwargs.setdefault("cls", HelpCommand)  # plain help that keeps every flag whole (help.py)
        register = super().command(*args, **kwargs)

        def decorator(function: Callable[..., Any]) -> Callable[..., Any]:
            name = (args[0] if args else kwargs.get("name")) or function.__name__.replace("_", "-")

            @functools.wraps(function)  # Typer reads the options from the wrapped signature
            def quieted(*a: Any, **k: Any) -> Any:
                if name not in LAUNCHED_COMMANDS:
                    check_one_process(name)  # under accelerate launch each process would write the same output
                check_inputs(k)  # a missing path or unknown name: one line now, not after transformers loads
                if hasattr(function, "check_options"):  # the command's own (settings_options, a method's paths)
                    function.check_options(k)
                _quiet_libraries()
                return function(*a, **k)

            register(quieted)
            return function

        return decorator


@dataclass
class LateCommands:
    """Commands that join the app only when one is named: the plug-ins' (``commands/methods.py`` sets these), whose
    import may be slow or hang, so that ``--help`` and every other command never import them."""

    #: the names and one-line help of the commands not made yet, read without importing anything
    listed: Callable[[], list[tuple[str, str]]] = lambda: []
    #: make the command that answers to a name on the app, and return its name (None: there is none)
    make: Callable[[str], str | None] = lambda name: None


#: set by ``commands/methods.py``
LATE = LateCommands()


class _Commands(HelpGroup):
    """The ``ghostify`` group: its late commands (:class:`LateCommands`) are listed by their declared name and help,
    and made when one is named."""

    def list_commands(self, ctx: Any) -> list[str]:
        names = super().list_commands(ctx)
        return names + sorted(name for name, _ in LATE.listed() if name not in names)

    def late_rows(self) -> list[tuple[str, str]]:
        return LATE.listed()

    def get_command(self, ctx: Any, name: str) -> Any:
        found = super().get_command(ctx, name)
        if found is not None:
            return found
        made = LATE.make(name)
        info = next((c for c in app.registered_commands if made is not None and c.name == made), None)
        if info is None:
            return None
        command = typer.main.get_command_from_info(info, pretty_exceptions_short=app.pretty_exceptions_short,
                                                   rich_markup_mode=app.rich_markup_mode)
        self.add_command(command, name)
        return command


app = _Ghostify(
    name="ghostify",
    help="Compress Hugging Face encoders with the GhostBERT recipe: importance, prune, attach-ghost, "
    "distill, finetune; each command reads a checkpoint and writes a new one.",
    no_args_is_help=True,
    add_completion=True,  # --install-completion / --show-completion SHELL
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # help.py writes --help as plain text: rich's panels cut flags at 80 columns
    cls=_Commands,
)


#: what runs as the command line is read, unless it asks only for --version: the commands of the methods loaded
#: already join then (``commands/methods.py``; plug-ins not imported yet join when their command is named: ``LATE``)
BEFORE_COMMANDS: list[Callable[[], None]] = []


def sort_commands() -> None:
    """--help lists the commands by name, wherever (and whenever: plug-ins join late) they were declared."""
    app.registered_commands.sort(key=lambda command: command.name or command.callback.__name__.replace("_", "-"))


def version_line() -> str:
    """ghostify's version and those of the libraries it runs on, read from the installed packages'
    metadata (importing torch only to ask it would take seconds)."""
    parts = []
    for package in ("torch", "transformers"):
        try:
            parts.append(f"{package} {metadata.version(package)}")
        except metadata.PackageNotFoundError:
            parts.append(f"{package} not installed")
    return f"ghostify {__version__} ({', '.join(parts)})"


def _print_version(value: bool) -> None:
    if value:
        print(version_line())
        raise typer.Exit()


@app.callback()
def _options(
    version: Annotated[bool, typer.Option("--version", is_eager=True, callback=_print_version,
                                          help="Print the versions of ghostify, torch and transformers, and exit.")] = False,
) -> None:
    """ghostify's own options (its help text is the app's)."""

DEBUG_VARIABLE = "GHOSTIFY_DEBUG"


def _one_line_warning(message, category, filename, lineno, file=None, line=None, *, said: set[str]) -> None:
    if not is_main_process():  # under accelerate launch every process warns alike: say it once
        return
    text = str(message).strip().splitlines()[0] if str(message).strip() else category.__name__
    if text in said:  # a file read more than once in a run (a checkpoint's record is) is one warning
        return
    said.add(text)
    print(f"warning: {text}", file=sys.stderr)


def _quiet_libraries() -> None:
    """Library chatter (transformers' per-weight notices, datasets' bars) hides ghostify's own
    messages; users can still ask for it with TRANSFORMERS_VERBOSITY. Run as a command starts
    (``--help`` and ``--version`` need no transformers)."""
    if "TRANSFORMERS_VERBOSITY" not in os.environ:
        from transformers.utils import logging as hf_logging

        hf_logging.set_verbosity_error()
        hf_logging.disable_progress_bar()
        logging.getLogger("huggingface_hub").setLevel(logging.ERROR)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def _error(text: str) -> None:
    """One ``error:`` line on stderr, from the main process only: under ``accelerate launch`` every process
    refuses alike (or is terminated by the launcher once the main one has failed); the others exit with the same
    code quietly."""
    if is_main_process():
        print(f"error: {text}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; a known error becomes ``error: ...`` on stderr and exit code 2 (the commands
    are registered on ``app`` by importing ``ghostify.cli``, whose package imports them). Ctrl-C,
    SIGTERM and SIGHUP at any moment: one line, exit 128 + the signal."""
    debug = bool(os.environ.get(DEBUG_VARIABLE))
    try:
        with warnings.catch_warnings(), terminate_on_signals():
            warnings.simplefilter("always", UserWarning)  # each run says its warnings, once per call
            if not debug:
                warnings.showwarning = functools.partial(_one_line_warning, said=set())
            return _run(argv, debug)
    except Terminated as exc:  # arrived while the outcome was being reported
        _error(exc.message)
        return 128 + exc.signum


def _asks_for_version(argv: list[str] | None) -> bool:
    """Whether ``--version`` comes before any command: it prints and exits first, so no plug-in need load."""
    for arg in sys.argv[1:] if argv is None else argv:
        if arg == "--version":
            return True
        if not arg.startswith("-"):
            return False
    return False


def _run(argv: list[str] | None, debug: bool) -> int:
    try:
        try:
            if not _asks_for_version(argv):
                for prepare in BEFORE_COMMANDS:  # a broken plug-in: one warning each (warnings are one line by now)
                    prepare()
            result = app(args=argv, prog_name="ghostify", standalone_mode=False)
        finally:  # a signal whose exception a library swallowed, or turned into another error
            Terminated.raise_if_arrived()
        return int(result or 0) if isinstance(result, int) else 0
    except GhostifyError as exc:
        if debug:
            raise
        for line in str(exc).splitlines() or [type(exc).__name__]:
            _error(line)  # a recipe reports all its problems, one per line
        return exc.exit_code
    except KeyboardInterrupt:
        _error("interrupted")
        return 130
    except Terminated as exc:
        _error(exc.message)
        return 128 + exc.signum
    except Exception as exc:
        if debug:
            raise
        if type(exc).__name__ == "NoArgsIsHelpError":  # `ghostify` alone: its help, as Click shows it (exit 2)
            print(exc.format_message())
            return int(exc.exit_code)
        if _is_usage_error(exc):
            ctx = getattr(exc, "ctx", None)
            hint = f" (see `{ctx.command_path} --help`)" if ctx is not None else " (see `ghostify --help`)"
            _error(f"{exc.format_message()}{hint}")
            return int(exc.exit_code)
        if type(exc).__name__ == "Abort":
            _error("aborted")
            return 130
        fault = environment_fault(exc, _output_argument(argv))
        if fault is not None:
            _error(fault)
            return 1
        text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        _error(f"unexpected {type(exc).__name__}: {text} (set {DEBUG_VARIABLE}=1 for the traceback)")
        return 1


#: what libraries say (safetensors' Rust errors, torch's writer) when the OS refused a write
_FAULT_PATTERNS = (
    (errno.ENOSPC, ("No space left on device", "StorageFull", "code: 28", "file write failed")),
    (errno.EDQUOT, ("Disk quota exceeded", "code: 122")),
    (errno.EROFS, ("Read-only file system", "ReadOnlyFilesystem", "code: 30")),
    (errno.EACCES, ("Permission denied", "PermissionDenied", "code: 13")),
)


def environment_fault(exc: BaseException, output: str | None = None) -> str | None:
    """One actionable line for a fault of the machine rather than of the input (a full disk, a
    read-only or forbidden directory, an unsafe pickle), or None."""
    code = exc.errno if isinstance(exc, OSError) else None
    if code is None:
        text = str(exc)
        code = next((c for c, patterns in _FAULT_PATTERNS if any(p in text for p in patterns)), None)
    filename = getattr(exc, "filename", None) if isinstance(exc, OSError) else None
    if filename and output:  # inside the (now removed) temporary directory beside the output: name the output
        output_abs = os.path.abspath(output)
        hidden = os.path.join(os.path.dirname(output_abs), f".{os.path.basename(output_abs)}.")
        if os.path.abspath(str(filename)).startswith(hidden):
            filename = output
    path = str(filename) if filename else (output or "the output directory")
    where = _visible(path, output)
    if code in (errno.ENOSPC, errno.EDQUOT):
        return f"no space left on the device (or quota) while writing {path}: free space at {where} or choose another -o on a disk with room"
    if code == errno.EROFS:
        fix = "choose an -o on a writable one (or remount {} read-write)" if output else "remount {} read-write"
        return f"{path} is on a read-only file system: " + fix.format(where)
    if code in (errno.EACCES, errno.EPERM):
        return f"permission denied for {path}: fix the permissions of {where} or choose another -o"
    if code == errno.ENAMETOOLONG:
        return (f"{path}: a name in this path is longer than the file system allows (File name too long); "
                "choose a shorter path")
    if code == errno.ENOTDIR:
        return f"{path}: a part of the path is a file, not a directory; choose another path"
    if "weights_only" in str(exc) or type(exc).__name__ == "UnpicklingError":
        match = re.search(r"Unsupported global: GLOBAL ([\w.]+)", str(exc))
        what = f" (it references {match.group(1)})" if match else ""
        return ("a pickle checkpoint is unsafe to load" + what + "; convert it to safetensors in a trusted environment "
                "with transformers' save_pretrained(..., safe_serialization=True), or re-download the checkpoint")
    return None


def _visible(path: str, output: str | None) -> str:
    """The directory to act on: for a write beside the output (its temporary directory is gone
    by now) the output's parent, the user's own path; otherwise the path's directory."""
    full = os.path.abspath(path)
    if output:
        parent = os.path.dirname(os.path.abspath(output))
        if full == os.path.abspath(output) or full.startswith(parent + os.sep):
            return parent
    return os.path.dirname(full) or full


def _output_argument(argv: list[str] | None) -> str | None:
    args = list(sys.argv[1:] if argv is None else argv)
    for i, arg in enumerate(args):
        if arg in ("-o", "--output") and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith("--output="):
            return arg.split("=", 1)[1]
    return None


def _is_usage_error(exc: Exception) -> bool:
    """Typer's command-line parsing errors (bad option, missing argument, invalid value).

    Typer re-exports only some of them (``typer.BadParameter``), so recognise the family by its
    interface: a message formatter and an exit code."""
    return hasattr(exc, "format_message") and isinstance(getattr(exc, "exit_code", None), int)


def run() -> None:
    """The console script ``ghostify`` (and ``python -m ghostify``)."""
    set_cpu_defaults()  # before any command imports torch: OpenMP and oneDNN read them then (threads.py)
    try:
        code = main()
    except KeyboardInterrupt:  # in the instants before main() installs its handlers, or after
        _error("interrupted")
        code = 130
    sys.exit(code)
