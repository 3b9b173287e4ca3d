"""Checks of ``augment``'s settings and its masked LM, before anything is loaded or written."""

from __future__ import annotations

from pathlib import Path

from ..checkpoint import load_config
from ..errors import CheckpointError, GhostifyError
from ..files import TOKENIZER_FILES
from ..heads import MASKED_LM, architectures, has_head
from ..settings import DataSettings
from ..tokenization import check_max_length, load_tokenizer


def check_settings(per_example, replace_prob, top_k, max_length, batch_size, max_samples) -> None:
    if per_example is not None and per_example < 1:
        raise GhostifyError(f"--per-example {per_example} makes no new examples; use 1 or more")
    if not 0 < replace_prob <= 1:
        raise GhostifyError(f"--replace-prob {replace_prob} is outside (0, 1]; TinyBERT uses 0.4")
    if top_k < 1:
        raise GhostifyError(f"--top-k {top_k} leaves no candidates; use 1 or more (TinyBERT: 15)")
    check_max_length(max_length)  # the models' own limits are checked once they are known
    if batch_size < 1:
        raise GhostifyError(f"--batch-size {batch_size} must be at least 1")
    DataSettings(max_samples=max_samples).validate()


def require_masked_lm(mlm) -> None:
    config = load_config(mlm)
    if not has_head(config, MASKED_LM):
        names = architectures(config)
        what = " / ".join(names) if names else f"{config.model_type} (no architecture named)"
        raise CheckpointError(
            f"{mlm} is a {what} checkpoint without a masked-LM head; --mlm needs a …ForMaskedLM checkpoint "
            "(e.g. bert-base-uncased, roberta-base, distilbert-base-uncased)"
        )


def checked_tokenizer(source, flag: str):
    """The tokenizer of ``source``; transformers 5 builds an *empty* one from the config when a
    directory has no tokenizer files, so check for the files first."""
    path = Path(source).expanduser()
    if path.is_dir() and not any((path / name).is_file() for name in TOKENIZER_FILES):
        raise CheckpointError(
            f"no tokenizer in {source} (none of tokenizer.json, vocab.txt, ...); {flag} needs one: copy the "
            "tokenizer files of the model it came from into it"
        )
    tokenizer = load_tokenizer(source)
    if len(tokenizer) <= len(set(tokenizer.all_special_ids)):
        raise CheckpointError(f"the tokenizer of {source} has no vocabulary beyond its special tokens; {flag} needs a real one")
    return tokenizer


def mlm_tokenizer(mlm):
    tokenizer = checked_tokenizer(mlm, "--mlm")
    if tokenizer.mask_token is None or tokenizer.mask_token_id is None:
        raise CheckpointError(f"the tokenizer of {mlm} has no mask token; --mlm needs a masked-LM tokenizer")
    if not getattr(tokenizer, "is_fast", False):
        raise CheckpointError(
            f"the tokenizer of {mlm} is not a fast (tokenizers) tokenizer; augmentation needs its word "
            "boundaries and character offsets: save it with tokenizer.json"
        )
    return tokenizer
