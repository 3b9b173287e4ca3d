"""Files apart from what a checkpoint means: output checks that keep every input untouched,
atomic directories and files with the user's umask, tokenizer files.

Every write that a kill could interrupt goes through a temporary sibling and one rename, so a
crash never leaves a half-written output behind.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import re
import shutil
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from .console import is_main_process
from .errors import CheckpointError, GhostifyError, Terminated

log = logging.getLogger(__name__)


def path_inside(directory: str | os.PathLike, relative: Any, what: str) -> Path:
    """``directory / relative`` for a path read from inside a model ``directory`` (``what``: the
    file, and field, that names it: ``"modules.json"``, ``"config.json references.file"``), refused
    when it leaves the directory: absolute, through ``..``, or through a symlink pointing elsewhere.
    A model directory is untrusted input: what it names is read, and copied into outputs, so it
    must be part of the model.

    A snapshot of the Hugging Face cache (``models--org--name/snapshots/<rev>/``) links every file
    to the repository's ``blobs/``: those links stay inside the model."""
    root = Path(directory).expanduser()
    named = f"{root / what.split()[0]}{what[len(what.split()[0]):]}"  # the file's path, then the field
    fix = f"fix {what} to name a path inside the model directory, or copy the files into it"
    if not isinstance(relative, str) or not relative.strip():
        raise GhostifyError(f"{named} names {relative!r} where a path inside {root} is expected; {fix}")
    if Path(relative).is_absolute() or ".." in Path(relative).parts:
        raise GhostifyError(f"{named} names {relative!r}, which leaves the model directory {root}; {fix}")
    path = root / relative
    base = root.resolve()
    allowed = [base]
    if base.parent.name == "snapshots" and (base.parent.parent / "blobs").is_dir():
        allowed.append((base.parent.parent / "blobs").resolve())
    target = path.resolve()
    if not any(target == a or target.is_relative_to(a) for a in allowed):
        if what == relative:  # the file itself, not a name inside another file
            fix = "put the file itself in the model directory in place of the symlink"
        by = "" if what == relative else f" ({named} names it)"
        raise GhostifyError(f"{path} is a symlink to {target}, outside the model directory {root}{by}; {fix}")
    return path


def name_max(directory: Path) -> int:
    """The longest file name (bytes) the file system of ``directory`` (or its nearest existing
    parent) allows."""
    for parent in (directory, *directory.parents):
        try:
            return int(os.pathconf(parent, "PC_NAME_MAX"))
        except (OSError, ValueError):  # not there (yet), or a name too long itself
            continue
    return 255


#: what atomic_directory adds to the output's name for its temporary sibling: ``.NAME.tmp-`` and 8 random characters
TEMPORARY_EXTRA = len("..tmp-") + 8


def check_name_length(out: Path, flag: str = "-o") -> None:
    """Refuse an output whose name the file system cannot hold, with its temporary sibling's
    prefix and suffix (the OS would say only 'File name too long', half-way through the command)."""
    limit = name_max(out.absolute().parent)
    for part in out.absolute().parts[1:]:
        if len(os.fsencode(part)) > limit:
            raise GhostifyError(f"{flag} {_short(out)}: a name of {len(os.fsencode(part))} bytes, longer than "
                                f"the {limit} the file system allows; choose a shorter {flag}")
    if len(os.fsencode(out.name)) + TEMPORARY_EXTRA > limit:
        raise GhostifyError(f"{flag} {_short(out)}: a name of {len(os.fsencode(out.name))} bytes; the file "
                            f"system allows {limit}, and ghostify writes through a temporary sibling that adds "
                            f"{TEMPORARY_EXTRA}: choose an {flag} name of at most {limit - TEMPORARY_EXTRA} bytes")


def _short(path: Path) -> str:
    """``path`` with its long names cut, for a message that stays readable."""
    return os.sep.join(part if len(part) <= 40 else part[:20] + "..." for part in str(path).split(os.sep))


def check_output_dir(output: str | os.PathLike, *, overwrite: bool, inputs: tuple[Any, ...] = ()) -> Path:
    """Refuse an output that exists (unless ``overwrite``) or that overlaps an input.

    ``inputs`` are every path the command reads (model, teacher, scores, dataset, ...), each a
    path or a ``(label, path)`` pair; hub ids and other paths that do not exist are skipped."""
    out = Path(output).expanduser()
    check_name_length(out)
    check_disjoint([out], inputs)
    check_not_a_file(out)  # before "pass --overwrite", which would not help
    if out.exists() and not overwrite:
        raise GhostifyError(f"output directory {out} already exists; pass --overwrite to replace it or choose another -o")
    for parent in out.absolute().parents:
        if parent.exists():
            if not parent.is_dir():
                raise GhostifyError(f"output {out} cannot be created: {parent} is a file, not a directory; choose another -o")
            break
    return out


def check_not_a_file(output: str | os.PathLike) -> None:
    """Refuse an output directory that names an existing file (--overwrite replaces only directories)."""
    out = Path(output).expanduser()
    if out.exists() and not out.is_dir():
        raise GhostifyError(f"output {out} exists and is a file; choose another -o")


def check_input_file(path: str | os.PathLike, what: str, kind: str, *, example: str) -> Path:
    """An input file a command reads whole (``what``: "recipe", of ``kind`` "YAML"), refused in one
    line when it is missing, a directory (``example``: the file it may hold) or not a regular file.
    Light: the command line checks it before torch loads."""
    path = Path(path)
    if path.is_dir():
        raise GhostifyError(f"{what} {path} is a directory, not a {kind} file; name the {what} file "
                            f"(e.g. {path / example})")
    if not path.exists():
        raise GhostifyError(f"{what} {path} does not exist; check the path")
    if not path.is_file():
        raise GhostifyError(f"{what} {path} is not a regular file; name a {kind} file")
    return path


def looks_like_path(source: str) -> bool:
    """Whether a model name is meant as a local path rather than a hub id (``org/name``)."""
    return (source.startswith((".", "/", "~")) or source.endswith("/") or source.count("/") > 1
            or os.sep + os.sep in source)


def check_source(source: str | os.PathLike, what: str = "checkpoint") -> None:
    """Refuse a checkpoint named by a local path that does not exist (a hub id is the hub's to answer).
    Light on purpose: the command line checks its inputs with it before torch loads."""
    if not Path(source).expanduser().exists() and looks_like_path(str(source)):
        raise CheckpointError(f"{what} {source} does not exist; check the path")


def check_disjoint(outputs, inputs, *, flag: str = "-o") -> None:
    """Refuse any output that is, contains or lies inside an existing input: writing it (with
    --overwrite, replacing it) would modify or delete what the command reads."""
    for output in outputs:
        if output is None:
            continue
        dst = Path(output).expanduser().resolve()
        for item in inputs:
            label, source = item if isinstance(item, tuple) else ("input", item)
            if source is None or str(source) == "" or not Path(str(source)).expanduser().exists():
                continue
            src = Path(str(source)).expanduser().resolve()
            named = f"{label} {source}" if label == "input" else f"input {label} {source}"
            if dst == src:
                raise GhostifyError(f"output {output} is the {named}; inputs are never modified: choose another {flag}")
            if src.is_relative_to(dst):
                raise GhostifyError(f"output {output} contains the {named}; inputs are never modified: choose another {flag}")
            if dst.is_relative_to(src):
                raise GhostifyError(f"output {output} lies inside the {named}; inputs are never modified: choose another {flag}")


def _umask() -> int:
    """The process umask. Linux shows it in /proc without changing it; elsewhere reading it means
    setting it, so it is set straight back (a moment in which another thread's files could get
    the stand-in mask: the restrictive 0o077 errs on the private side)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    old = os.umask(0o077)
    os.umask(old)
    return old


#: (device, inode) of the input files ``link_input`` linked into an output: they keep the
#: input's permissions, since changing a link's mode changes the input's
_INPUT_INODES: set[tuple[int, int]] = set()


def link_input(source: str | os.PathLike, destination: Path) -> bool:
    """Put an input file at ``destination`` (inside an output being written) without copying its
    bytes: a hard link, or a copy where the file system refuses one (another device, a file of
    another user). True when linked.

    Safe because ghostify never opens an existing file for writing: every output is a new file
    in a new directory, renamed into place, so no later write reaches the shared inode."""
    try:
        os.link(source, destination)
    except OSError:
        shutil.copyfile(source, destination)
        return False
    stat = os.stat(destination)
    _INPUT_INODES.add((stat.st_dev, stat.st_ino))
    return True


def _apply_umask(root: Path) -> None:
    """Give a finished output the permissions the user's umask asks for: mkdtemp makes 0700
    directories and safetensors writes 0600 files, which other users could not read. A file
    linked from an input keeps the input's mode (see ``link_input``)."""
    mask = _umask()
    os.chmod(root, 0o777 & ~mask)
    for directory, dirs, files in os.walk(root):
        for name in dirs:
            os.chmod(os.path.join(directory, name), 0o777 & ~mask)
        for name in files:
            path = os.path.join(directory, name)
            if os.path.islink(path):
                continue
            stat = os.stat(path)
            if (stat.st_dev, stat.st_ino) not in _INPUT_INODES:
                os.chmod(path, 0o666 & ~mask)


@contextlib.contextmanager
def atomic_directory(output: str | os.PathLike, *, overwrite: bool = False) -> Iterator[Path]:
    """Yield a temporary sibling directory; on success it replaces ``output`` in one rename.

    A crash (or Ctrl-C, SIGTERM, SIGHUP) removes the temporary directory, and never leaves a
    half-written ``output``."""
    out = Path(output).expanduser()
    if out.exists() and not overwrite:
        raise GhostifyError(f"output directory {out} already exists; pass --overwrite to replace it or choose another -o")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    try:
        yield tmp
        Terminated.raise_if_arrived()  # a library swallowed the Ctrl-C: the output must not appear
        _apply_umask(tmp)
        if out.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.parent))
            try:
                os.replace(out, old / out.name)
                os.replace(tmp, out)
            except BaseException:  # interrupted between the two renames: put the old output back
                if not out.exists() and (old / out.name).exists():
                    os.replace(old / out.name, out)
                raise
            finally:
                shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


@contextlib.contextmanager
def held_lock(path: str | os.PathLike, on_wait: Callable[[], None] | None = None) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``path`` (created if missing), waiting for its holder if there is one
    (``on_wait`` is called first, to say so). The OS releases it however the holder ends; the file stays
    (removing it would race with a waiter). Raises OSError when the file cannot be made."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if on_wait is not None:
                on_wait()
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


#: the file inside a run's output directory (``ghostify run``, ``compress``) that the run holds locked
LOCK_FILE = ".ghostify.lock"


@contextlib.contextmanager
def output_lock(directory: str | os.PathLike, flag: str = "-o") -> Iterator[Path]:
    """Hold the lock of ``directory`` (created if missing) while a run writes into it, over many steps:
    a second run on the same directory is refused at once, in one line naming the process that holds
    it, rather than interleaving with the first (deleting its half-written stages).

    The lock is ``flock`` on ``directory/.ghostify.lock`` (which holds the holder's process id, for the
    message): the OS releases it when the holder's process ends, however it ends, so a killed run leaves
    no stale lock (at most the file, which its re-run takes over) and resumes. The holder removes the file
    before it lets go; a run that opened the file just before must then lock the new one, so it checks,
    once it holds a lock, that the file it locked is still the one at the path."""
    root = Path(directory).expanduser()
    root.mkdir(parents=True, exist_ok=True)
    if not is_main_process():  # the processes of one `accelerate launch` share the output by design
        yield root
        return
    path = root / LOCK_FILE
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 32).decode(errors="replace").strip()
            os.close(fd)
            by = f" (process {holder})" if holder.isdigit() else ""
            raise GhostifyError(f"{root} is in use by another ghostify run{by}; wait for it to finish, or choose "
                                f"another {flag}") from None
        try:
            if os.stat(path).st_ino == os.fstat(fd).st_ino:
                break
        except FileNotFoundError:  # its holder removed it as it finished: lock the next one
            pass
        os.close(fd)
    try:
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        yield root
    finally:
        with contextlib.suppress(OSError):
            path.unlink()
        os.close(fd)  # releases the lock


def remove_tree(path: Path) -> None:
    """Remove ``path`` as one step: renamed away first, so that a kill never leaves it half
    deleted (a resume would find a partial training state)."""
    if not path.exists():
        return
    trash = Path(tempfile.mkdtemp(prefix=f".{path.name}.old-", dir=path.parent))
    os.replace(path, trash / path.name)
    shutil.rmtree(trash, ignore_errors=True)


def write_text_atomically(path: Path, text: str) -> None:
    """Write ``path`` in one rename: a kill never leaves a truncated stage.json behind (which
    would make every later run fail on it instead of re-running the stage)."""
    tmp = path.with_name(f".{path.name}.tmp-{uuid.uuid4().hex[:8]}")
    try:
        tmp.write_text(text)
        os.replace(tmp, path)
    except BaseException:  # a full disk, a directory in the way, a signal: no temporary file stays behind
        with contextlib.suppress(OSError):  # never created (a read-only directory): nothing to remove
            tmp.unlink()
        raise


TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "vocab.txt",
    "vocab.json",
    "merges.txt",
    "sentencepiece.bpe.model",
    "spm.model",
    "added_tokens.json",
)


def copy_tokenizer(source: str | os.PathLike, destination: Path) -> bool:
    """Copy the tokenizer files of a local checkpoint (or save a hub tokenizer); False if none.
    A tokenizer with its own code (``auto_map`` in ``tokenizer_config.json``) keeps it."""
    src = Path(source)
    if src.is_dir():
        copied = False
        for name in TOKENIZER_FILES:
            if (src / name).is_file():
                shutil.copy2(path_inside(src, name, name), destination / name)
                copied = True
        copy_code_files(src, destination, _tokenizer_code(src), "tokenizer_config.json auto_map")
        return copied
    try:
        from transformers import AutoTokenizer

        AutoTokenizer.from_pretrained(str(source)).save_pretrained(str(destination))
        return True
    except (OSError, ValueError) as exc:
        log.debug("no tokenizer saved for %s: %s", source, exc)
        return False


def _tokenizer_code(directory: Path) -> list[str]:
    """The classes ``tokenizer_config.json``'s ``auto_map`` names (``"module.Class"``), if any."""
    try:
        config = json.loads((directory / "tokenizer_config.json").read_text())
    except (OSError, ValueError):
        return []  # no tokenizer config, or one transformers will refuse itself
    auto_map = config.get("auto_map") if isinstance(config, dict) else None
    values = auto_map.values() if isinstance(auto_map, dict) else auto_map if isinstance(auto_map, list) else []
    flat = [v for value in values for v in (value if isinstance(value, list) else [value])]
    return [v for v in flat if isinstance(v, str)]


def copy_code_files(origin: Path, destination: Path, references: list[str], what: str) -> list[str]:
    """Copy the Python modules of ``origin`` that ``references`` (``"module.Class"``, as in an
    ``auto_map`` or a sentence-transformers module type) name, with the modules they import
    relatively: transformers runs such code from the one flat folder. References to another
    repository (``"org/repo--module.Class"``) or to a package (``"sentence_transformers.models.Pooling"``)
    are not files of the model. Returns the names of the files copied."""
    todo = [ref.rsplit(".", 1)[0] for ref in references if "--" not in ref and "." in ref]
    copied: list[str] = []
    while todo:
        module = todo.pop()
        if not module.isidentifier() and ("/" in module or module.startswith(".")):
            path_inside(origin, f"{module}.py", what)  # a path, not a module name: refused when it leaves
        name = f"{module}.py"
        if name in copied or not module.isidentifier() or not (origin / name).is_file():
            continue  # a package's class (sentence_transformers.models.Pooling), or no file of the model
        source = path_inside(origin, name, what)
        shutil.copy2(source, destination / name)
        copied.append(name)
        todo += re.findall(r"^\s*from\s+\.(\w+)\s+import", source.read_text(errors="replace"), flags=re.MULTILINE)
    return copied
