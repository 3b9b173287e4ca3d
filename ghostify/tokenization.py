"""Reading text: a checkpoint's tokenizer, whether a teacher reads it like the student, and how long
an input may be. Outside ``ghostify.steps`` so that feature packages (``ghostify.augment``) can use it
without importing every step."""

from __future__ import annotations

import os
from pathlib import Path

from .architectures import usable_positions
from .checkpoint import load_config
from .errors import CheckpointError, GhostifyError
from .files import TOKENIZER_FILES, path_inside


def load_tokenizer(source: str | os.PathLike):
    """The tokenizer of a checkpoint; a one-line error when there is none (transformers 5 would
    otherwise build an empty one from a directory without tokenizer files)."""
    from transformers import AutoTokenizer  # heavy: only when a tokenizer is needed

    fix = "copy the tokenizer files of the original model into it"
    path = Path(source)
    if path.is_dir() and not any((path / name).is_file() for name in TOKENIZER_FILES):
        raise CheckpointError(f"no tokenizer files in {source}; {fix}")
    for name in TOKENIZER_FILES if path.is_dir() else ():
        if (path / name).is_file():
            path_inside(path, name, name)  # a symlink out of the model would read another file
    try:
        return AutoTokenizer.from_pretrained(str(source))
    except (OSError, ValueError, TypeError) as exc:
        raise CheckpointError(f"no usable tokenizer in {source} ({type(exc).__name__}); {fix}") from exc


#: tokenizer attributes whose ids the teacher and the student must agree on
SPECIAL_TOKENS = ("pad_token_id", "cls_token_id", "sep_token_id", "mask_token_id", "unk_token_id", "bos_token_id",
                  "eos_token_id")


def check_same_tokenizer(teacher: str | os.PathLike, student: str | os.PathLike, *, flag: str = "--teacher") -> None:
    """Refuse a teacher whose tokenizer maps text to other ids than the student's: the teacher
    would read the student's token ids as different words (or past its vocabulary's end)."""
    a, b = load_tokenizer(teacher), load_tokenizer(student)
    vocab_a, vocab_b = a.get_vocab(), b.get_vocab()
    if vocab_a != vocab_b:
        differ = sorted(set(vocab_a.items()) ^ set(vocab_b.items()))
        example = f"e.g. {differ[0][0]!r}" if differ else ""
        raise GhostifyError(
            f"{flag} {teacher} and the student {student} have different vocabularies ({len(vocab_a):,} and "
            f"{len(vocab_b):,} tokens; {example}): the teacher would read the student's token ids as other words; "
            "use a teacher and student of the same tokenizer"
        )
    for name in SPECIAL_TOKENS:
        if getattr(a, name, None) != getattr(b, name, None):
            raise GhostifyError(
                f"{flag} {teacher} and the student {student} have different special tokens ({name} "
                f"{getattr(a, name, None)} vs {getattr(b, name, None)}); use a teacher and student of the same tokenizer"
            )


def max_tokens(config) -> int:
    """The longest input the model reads (its family's fact: RoBERTa-style position ids start after
    the padding id)."""
    return usable_positions(config)


def check_max_length(max_length: int, *sources: str | os.PathLike | None) -> None:
    """``--max-length`` within 8 and what every model reads (longer inputs would index past the
    position embeddings)."""
    if isinstance(max_length, bool) or not isinstance(max_length, int) or max_length < 8:
        raise GhostifyError(f"--max-length {max_length!r} is too short; use 8 or more (the paper: 128)")
    for source in sources:
        if source is None:
            continue
        limit = max_tokens(load_config(source))
        if max_length > limit:
            raise GhostifyError(
                f"--max-length {max_length} exceeds the {limit} tokens that {source} can read (its position "
                f"embeddings); use at most {limit}"
            )
