"""Files apart from what a checkpoint means: output checks that keep every input untouched,
atomic directories and files with the user's umask, tokenizer files.

Every write that a kill could interrupt goes through a temporary sibling and one rename, so a
crash never leaves a half-written output behind.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .errors import GhostifyError

log = logging.getLogger(__name__)


def check_output_dir(output: str | os.PathLike, *, overwrite: bool, inputs: tuple[Any, ...] = ()) -> Path:
    """Refuse an output that exists (unless ``overwrite``) or that overlaps an input.

    ``inputs`` are every path the command reads (model, teacher, scores, dataset, ...), each a
    path or a ``(label, path)`` pair; hub ids and other paths that do not exist are skipped."""
    out = Path(output).expanduser()
    check_disjoint([out], inputs)
    if out.exists() and not overwrite:
        raise GhostifyError(f"output directory {out} already exists; pass --overwrite to replace it or choose another -o")
    if out.exists() and not out.is_dir():
        raise GhostifyError(f"output {out} exists and is a file; choose another -o")
    for parent in out.absolute().parents:
        if parent.exists():
            if not parent.is_dir():
                raise GhostifyError(f"output {out} cannot be created: {parent} is a file, not a directory; choose another -o")
            break
    return out


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


def _apply_umask(root: Path) -> None:
    """Give a finished output the permissions the user's umask asks for: mkdtemp makes 0700
    directories and safetensors writes 0600 files, which other users could not read."""
    mask = _umask()
    os.chmod(root, 0o777 & ~mask)
    for directory, dirs, files in os.walk(root):
        for name in dirs:
            os.chmod(os.path.join(directory, name), 0o777 & ~mask)
        for name in files:
            path = os.path.join(directory, name)
            if not os.path.islink(path):
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
    tmp.write_text(text)
    os.replace(tmp, path)


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
    """Copy the tokenizer files of a local checkpoint (or save a hub tokenizer); False if none."""
    src = Path(source)
    if src.is_dir():
        copied = False
        for name in TOKENIZER_FILES:
            if (src / name).is_file():
                shutil.copy2(src / name, destination / name)
                copied = True
        return copied
    try:
        from transformers import AutoTokenizer

        AutoTokenizer.from_pretrained(str(source)).save_pretrained(str(destination))
        return True
    except (OSError, ValueError) as exc:
        log.debug("no tokenizer saved for %s: %s", source, exc)
        return False
