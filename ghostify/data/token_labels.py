"""Token classification (NER, POS, chunking): word tags aligned to sub-word tokens, and the metrics on them.

Datasets tag words; encoders read sub-words. Each word's tag goes on its first sub-word, and the other sub-words and
the special tokens get ``IGNORE``, so the loss and the metrics count every word once (the convention of HF's run_ner
and of the papers' CoNLL numbers). Entity scores follow seqeval, so they compare with published results.

RoBERTa-family tokenizers (byte-level BPE: RoBERTa, DeBERTa, Longformer, ModernBERT, GPT-2 style) mark a word start
by the space before it. With pre-split words, transformers 5 silently encodes each word as if glued to the previous
one unless the tokenizer was loaded with ``add_prefix_space=True`` -- a text the model never saw in pretraining.
``tokenize_words`` refuses such a tokenizer with a ``DataError`` that says how to load it, rather than changing the
caller's tokenizer behind its back.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import DataError

#: label of sub-words and special tokens that the loss and the metrics skip (torch's CrossEntropyLoss ignore_index)
IGNORE = -100

#: the tagging schemes of seqeval's strict mode (seqeval.scheme classes of the same names)
SCHEMES = ("IOB1", "IOB2", "IOE1", "IOE2", "IOBES", "BILOU")


def align_labels(word_ids: list[int | None], word_labels: list[int], *, label_all_subwords: bool = False,
                 continuation: list[int] | None = None) -> list[int]:
    """Token labels from word labels: special tokens (word id None) get IGNORE; the first sub-word of each word gets
    the word's label; the other sub-words get IGNORE, or with label_all_subwords the word's label -- except that a
    B- tag continues as its I- tag (continuation[label] gives the label id to use for non-first sub-words, as
    HF's run_ner does with b_to_i_label; None: the same label)."""
    labels: list[int] = []
    previous: int | None = None
    for word in word_ids:
        if word is None:
            labels.append(IGNORE)
        elif not 0 <= word < len(word_labels):
            raise DataError(
                f"word id {word} has no label: the row has {len(word_labels)} word labels; give one label per word "
                "(the tokenizer's word_ids index the words it was given)"
            )
        elif word != previous:
            labels.append(word_labels[word])
        elif not label_all_subwords or word_labels[word] == IGNORE:
            labels.append(IGNORE)
        else:
            labels.append(_continued(word_labels[word], continuation))
        previous = word
    return labels


def _continued(label: int, continuation: list[int] | None) -> int:
    """The label of a non-first sub-word under label_all_subwords."""
    if continuation is None:
        return label
    if not 0 <= label < len(continuation):
        raise DataError(
            f"label {label} is outside continuation (length {len(continuation)}); build it with "
            "continuation_labels(names) over all the tag names"
        )
    return continuation[label]


def continuation_labels(names: list[str]) -> list[int]:
    """For each label name, the id used on non-first sub-words: B-X -> I-X when I-X exists, else itself."""
    index = {name: i for i, name in enumerate(names)}
    return [index.get("I-" + name[2:], i) if name.startswith("B-") else i for i, name in enumerate(names)]


def tokenize_words(batch: dict[str, list], tokenizer, *, tokens_column: str, tags_column: str, max_length: int,
                   label_all_subwords: bool = False, continuation: list[int] | None = None) -> dict[str, list]:
    """For datasets.map(batched=True): tokenise pre-split words (is_split_into_words=True, truncation, max_length)
    and attach aligned `labels`. Needs a fast tokenizer (word_ids); raise DataError otherwise. A byte-level BPE
    tokenizer (RoBERTa family) loaded without add_prefix_space=True is refused with a DataError saying to load it
    with AutoTokenizer.from_pretrained(..., add_prefix_space=True): without it each word would lose its leading
    space. No padding: a collator pads the batch (labels with IGNORE)."""
    _check_tokenizer(tokenizer)
    floor = tokenizer.num_special_tokens_to_add() + 1
    if isinstance(max_length, bool) or not isinstance(max_length, int) or max_length < floor:
        raise DataError(
            f"max_length {max_length!r} leaves no room for a word after the {floor - 1} special tokens; "
            f"use {floor} or more (the paper: 128)"
        )
    for column in (tokens_column, tags_column):
        if column not in batch:
            raise DataError(
                f"column {column!r} is missing (columns: {', '.join(batch)}); set tokens_column/tags_column to the "
                "dataset's words and tags (e.g. 'tokens' and 'ner_tags')"
            )
    words = [_words(row, i, tokens_column) for i, row in enumerate(batch[tokens_column])]
    tags = [_word_tags(row, i, tags_column) for i, row in enumerate(batch[tags_column])]
    for i, (row_words, row_tags) in enumerate(zip(words, tags)):
        if len(row_words) != len(row_tags):
            raise DataError(
                f"row {i} of the batch has {len(row_words)} words in {tokens_column!r} but {len(row_tags)} tags in "
                f"{tags_column!r}; every word needs exactly one tag"
            )
    encoded = tokenizer(words, is_split_into_words=True, truncation=True, max_length=max_length)
    result = {key: list(value) for key, value in encoded.items()}
    result["labels"] = [
        align_labels(encoded.word_ids(i), row_tags, label_all_subwords=label_all_subwords, continuation=continuation)
        for i, row_tags in enumerate(tags)
    ]
    return result


def _check_tokenizer(tokenizer: Any) -> None:
    """A tokenizer that can map tokens back to words, and that reads pre-split words as it reads text."""
    name = getattr(tokenizer, "name_or_path", "") or type(tokenizer).__name__
    if not getattr(tokenizer, "is_fast", False):
        raise DataError(
            f"tokenizer {name} ({type(tokenizer).__name__}) is not a fast tokenizer, and token classification needs "
            "its word_ids; load it with AutoTokenizer.from_pretrained(..., use_fast=True) from a tokenizer.json"
        )
    if needs_prefix_space(tokenizer):
        raise DataError(
            f"tokenizer {name} is a byte-level BPE (RoBERTa family) without add_prefix_space, so pre-split words "
            f"would lose the space before them; load it with AutoTokenizer.from_pretrained({name!r}, "
            "add_prefix_space=True)"
        )


def needs_prefix_space(tokenizer: Any) -> bool:
    """True when the backend pre-tokenizer is (or contains) ByteLevel with add_prefix_space off."""
    pre_tokenizer = getattr(getattr(tokenizer, "backend_tokenizer", None), "pre_tokenizer", None)
    if pre_tokenizer is None:
        return False
    try:
        state = json.loads(pre_tokenizer.__getstate__())
    except (AttributeError, TypeError, ValueError):
        return False
    return _byte_level_without_space(state)


def _byte_level_without_space(node: Any) -> bool:
    if isinstance(node, list):
        return any(_byte_level_without_space(item) for item in node)
    if not isinstance(node, dict):
        return False
    if node.get("type") == "ByteLevel" and not node.get("add_prefix_space", False):
        return True
    return any(_byte_level_without_space(value) for value in node.values())


def _words(row: Any, index: int, column: str) -> list[str]:
    if isinstance(row, (str, bytes)) or not isinstance(row, Sequence) or not all(isinstance(w, str) for w in row):
        raise DataError(
            f"row {index} of column {column!r} is {_show(row)}, not a list of words; token classification needs "
            "pre-split words (a list of strings per row)"
        )
    return list(row)


def _word_tags(row: Any, index: int, column: str) -> list[int]:
    if isinstance(row, (str, bytes)) or not isinstance(row, Sequence):
        raise DataError(f"row {index} of column {column!r} is {_show(row)}, not a list of tags; give one tag per word")
    for tag in row:
        if isinstance(tag, str):
            raise DataError(
                f"column {column!r} holds tag strings (e.g. {tag!r}); map them to ids first with "
                f"tag_ids(batch[{column!r}], label_names(...))"
            )
        if isinstance(tag, bool) or not isinstance(tag, int) or (tag < 0 and tag != IGNORE):
            raise DataError(
                f"tag {tag!r} in row {index} of column {column!r} is not a tag id; tags are ids 0, 1, 2, ... "
                f"({IGNORE} skips a word)"
            )
    return list(row)


def label_names(rows, tags_column: str, *, dataset: str = "the dataset") -> list[str]:
    """The tag names: from a datasets Sequence(ClassLabel) feature's names; for a column of strings, the sorted set
    of tags (O first when present); for integer ids without names, "0", "1", ...; DataError for anything else."""
    import datasets

    columns = list(getattr(rows, "column_names", None) or (rows.keys() if isinstance(rows, Mapping) else []))
    if tags_column not in columns:
        raise DataError(
            f"{dataset} has no column {tags_column!r} (columns: {', '.join(columns)}); set the tags column "
            "(e.g. 'ner_tags', 'pos_tags', 'chunk_tags')"
        )
    features = getattr(rows, "features", None)
    feature = features.get(tags_column) if features is not None else None
    if isinstance(feature, datasets.ClassLabel):
        raise DataError(
            f"column {tags_column!r} of {dataset} holds one class per row, not a tag per word; pick the column "
            "of word tags (a sequence of ClassLabel)"
        )
    inner = getattr(feature, "feature", None)
    if isinstance(inner, datasets.ClassLabel):
        return list(inner.names)
    tags: list[Any] = []
    for index, row in enumerate(rows[tags_column]):
        if isinstance(row, (str, bytes)) or not isinstance(row, Sequence):
            raise DataError(
                f"row {index} of column {tags_column!r} of {dataset} is {_show(row)}, not a list of tags; "
                "pick the column of word tags"
            )
        tags.extend(row)
    if not tags:
        raise DataError(f"column {tags_column!r} of {dataset} holds no tags; check the split and the tags column")
    if all(isinstance(tag, str) for tag in tags):
        names = sorted(set(tags))
        return ["O", *(name for name in names if name != "O")] if "O" in names else names
    if all(isinstance(tag, int) and not isinstance(tag, bool) for tag in tags):
        negative = [tag for tag in tags if tag < 0]
        if negative:
            raise DataError(
                f"tag {negative[0]} in column {tags_column!r} of {dataset} is negative; word tags are ids 0, 1, 2, ... "
                "(already aligned labels are not word tags: use the dataset's original tags column)"
            )
        return [str(i) for i in range(max(tags) + 1)]
    odd = [tag for tag in tags if isinstance(tag, bool) or not isinstance(tag, (str, int))]
    found = _show(odd[0]) if odd else "both strings and integers"
    raise DataError(
        f"column {tags_column!r} of {dataset} holds {found} among its tags; word tags are all strings or all "
        "integer ids (or a sequence of ClassLabel): convert the column"
    )


def tag_ids(batch_tags, names) -> list[list[int]]:
    """String tags -> ids by their position in names (ids already given pass through, checked), for datasets whose
    tags column holds strings."""
    index = {name: i for i, name in enumerate(names)}
    ids: list[list[int]] = []
    for row in batch_tags:
        converted = []
        for tag in row:
            if isinstance(tag, str):
                if tag not in index:
                    raise DataError(
                        f"tag {tag!r} is not among the {len(index)} tag names ({', '.join(map(str, names))}); "
                        "build the names with label_names over the same dataset"
                    )
                converted.append(index[tag])
            elif isinstance(tag, int) and not isinstance(tag, bool) and (0 <= tag < len(names) or tag == IGNORE):
                converted.append(tag)
            else:
                raise DataError(
                    f"tag {tag!r} is neither one of the {len(names)} tag names nor an id below {len(names)}; "
                    "check the tags column"
                )
        ids.append(converted)
    return ids


def entity_metrics(predictions: list[list[str]], references: list[list[str]], *,
                   scheme: str | None = None) -> dict[str, float]:
    """precision, recall, f1 (entity level, micro, as seqeval computes them; scheme None = seqeval's default
    conlleval-style lenient mode; a scheme name = strict mode with that seqeval.scheme class) and accuracy
    (token level over the labelled tokens). Unknown scheme -> DataError listing SCHEMES. Empty input -> zeros."""
    token_class = _scheme_class(scheme)
    predictions, references = [list(p) for p in predictions], [list(r) for r in references]
    if len(predictions) != len(references):
        raise DataError(
            f"{len(predictions)} predicted sequences for {len(references)} reference sequences; give one prediction "
            "per reference"
        )
    for i, (predicted, reference) in enumerate(zip(predictions, references)):
        if len(predicted) != len(reference):
            raise DataError(
                f"sequence {i} has {len(predicted)} predicted tags for {len(reference)} reference tags; give one "
                "prediction per labelled token (decode() keeps the same positions of both)"
            )
        for tag in (*predicted, *reference):
            if not isinstance(tag, str) or not tag:
                raise DataError(f"tag {tag!r} in sequence {i} is not a tag name; map ids to names with decode()")
    total = sum(len(reference) for reference in references)
    if total == 0:  # nothing labelled: seqeval would divide by zero
        return {"precision": 0.0, "recall": 0.0, "f1": 0.0, "accuracy": 0.0}
    if token_class is None:
        from seqeval.metrics.sequence_labeling import precision_recall_fscore_support

        precision, recall, f1, _ = precision_recall_fscore_support(references, predictions, average="micro",
                                                                   zero_division=0)
    else:
        from seqeval.metrics.v1 import precision_recall_fscore_support

        _check_scheme(predictions, references, token_class, scheme)
        precision, recall, f1, _ = precision_recall_fscore_support(references, predictions, average="micro",
                                                                   zero_division=0, scheme=token_class)
    correct = sum(p == r for predicted, reference in zip(predictions, references) for p, r in zip(predicted, reference))
    return {"precision": float(precision), "recall": float(recall), "f1": float(f1), "accuracy": correct / total}


def _scheme_class(scheme: str | None) -> Any:
    """The seqeval.scheme class of a scheme name (any case); None for the lenient mode."""
    if scheme is None:
        return None
    name = scheme.upper() if isinstance(scheme, str) else scheme
    if name not in SCHEMES:
        raise DataError(
            f"unknown tagging scheme {scheme!r}; use one of {', '.join(SCHEMES)} (seqeval's strict mode) or None "
            "(its lenient conlleval mode)"
        )
    from seqeval import scheme as schemes

    return getattr(schemes, name)


def _check_scheme(predictions: list[list[str]], references: list[list[str]], token_class: Any, scheme: str) -> None:
    """A one-line error for a tag whose prefix the strict scheme does not allow (seqeval raises KeyError/ValueError)."""
    from seqeval.scheme import Prefixes

    allowed = [name for name, prefix in Prefixes.items() if name != "ANY" and prefix in token_class.allowed_prefix]
    for sequence in (*references, *predictions):
        for tag in sequence:
            if tag[0] not in allowed:
                raise DataError(
                    f"tag {tag!r} does not fit the {scheme.upper()} scheme (prefixes {', '.join(allowed)}); pass the "
                    f"scheme the tags follow ({', '.join(SCHEMES)}) or scheme=None for seqeval's lenient mode"
                )


def decode(predictions, labels, names: list[str]) -> tuple[list[list[str]], list[list[str]]]:
    """From per-token predicted ids and gold labels (2-D tensors or lists, IGNORE where skipped) to per-sequence tag
    strings, keeping only the positions whose gold label is not IGNORE. 3-D logits are reduced by argmax."""
    predicted_rows, gold_rows = _id_rows(predictions, "predictions"), _id_rows(labels, "labels")
    if len(predicted_rows) != len(gold_rows):
        raise DataError(
            f"{len(predicted_rows)} predicted sequences for {len(gold_rows)} label sequences; pass the predictions "
            "and labels of the same batch"
        )
    predicted_tags: list[list[str]] = []
    gold_tags: list[list[str]] = []
    for i, (predicted, gold) in enumerate(zip(predicted_rows, gold_rows)):
        if len(predicted) != len(gold):
            raise DataError(
                f"sequence {i} has {len(predicted)} predicted tokens for {len(gold)} labels; pad predictions and "
                "labels to the same length"
            )
        kept = [(p, g) for p, g in zip(predicted, gold) if g != IGNORE]
        for value in (v for pair in kept for v in pair):
            if not 0 <= value < len(names):
                raise DataError(
                    f"label id {value} in sequence {i} has no name (there are {len(names)} tag names); decode with "
                    "the names the model was trained on"
                )
        predicted_tags.append([names[p] for p, _ in kept])
        gold_tags.append([names[g] for _, g in kept])
    return predicted_tags, gold_tags


def _id_rows(values: Any, what: str) -> list[list[int]]:
    """Rows of integer ids from a tensor, an array or nested lists; logits (a vector per token) become their argmax."""
    if getattr(values, "ndim", None) == 3:
        import torch

        values = torch.as_tensor(values).argmax(dim=-1)
    if hasattr(values, "detach"):
        values = values.detach().cpu()
    if hasattr(values, "tolist"):
        values = values.tolist()
    rows = []
    for row in values:
        if not isinstance(row, Sequence):
            raise DataError(
                f"{what} hold {_show(row)} where a sequence of token ids belongs; pass 2-D ids (batch, tokens)"
            )
        ids = []
        for value in row:
            if isinstance(value, Sequence):  # logits of one token
                value = max(range(len(value)), key=value.__getitem__)
            if isinstance(value, float) and value.is_integer():
                value = int(value)
            if isinstance(value, bool) or not isinstance(value, int):
                raise DataError(f"{what} hold {_show(value)} where a token id belongs; pass integer ids")
            ids.append(value)
        rows.append(ids)
    return rows


def _show(value: Any) -> str:
    """A short description of a value for an error message."""
    text = repr(value)
    return f"{type(value).__name__} {text[:40] + '...' if len(text) > 40 else text}"
