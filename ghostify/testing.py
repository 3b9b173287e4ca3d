"""Tiny random models of every supported family, for tests and examples (no downloads).

Example:
    >>> from ghostify.testing import tiny_model
    >>> model = tiny_model("bert", head="sequence-classification")
"""

from __future__ import annotations

import csv
import random
from pathlib import Path
from typing import Any

import torch

from .checkpoint import HEAD_CLASSES, available_heads
from .errors import GhostifyError

VOCAB = 99
HIDDEN = 32
HEADS = 4
LAYERS = 2
FFN = 37  # odd on purpose: widths must round, not divide

FAMILIES: dict[str, dict[str, Any]] = {
    "bert": {},
    "roberta": {"pad_token_id": 1},
    "xlm-roberta": {"pad_token_id": 1},
    "camembert": {"pad_token_id": 1},
    "electra": {"embedding_size": 16},
    "distilbert": {},
    "albert": {"embedding_size": 16, "num_hidden_layers": 3},
    "deberta-v2": {
        "relative_attention": True,
        "pos_att_type": ["p2c", "c2p"],
        "position_buckets": 8,
        "max_relative_positions": 16,
    },
    "mpnet": {},
    "roberta-prelayernorm": {"pad_token_id": 1},
    "xlm-roberta-xl": {"pad_token_id": 1},
    # 3 layers, global attention every 2nd: layers alternate global / sliding-window (a window of 2
    # tokens each side, shorter than the test batches' sequences)
    "modernbert": {"num_hidden_layers": 3, "global_attn_every_n_layers": 2, "local_attention": 4,
                   "pad_token_id": 0, "bos_token_id": 3, "eos_token_id": 4, "cls_token_id": 3, "sep_token_id": 4},
    # grouped-query attention: 4 query heads read 2 key/value heads
    "eurobert": {"num_key_value_heads": 2, "pad_token_id": 0, "bos_token_id": 3, "eos_token_id": 4,
                 "mask_token_id": 5},
    "gte": {"pad_token_id": 0},
    "nomic_bert": {"pad_token_id": 0},
    "jina_embeddings_v3": {"pad_token_id": 1},
}


def tiny_config(model_type: str, **overrides: Any):
    """A small config of ``model_type``: 2 layers (ALBERT: 1 shared layer applied 3 times)."""
    from transformers import AutoConfig  # deferred: transformers takes seconds to import

    if model_type == "distilbert":
        kwargs: dict[str, Any] = dict(vocab_size=VOCAB, dim=HIDDEN, n_layers=LAYERS, n_heads=HEADS, hidden_dim=FFN)
    else:
        kwargs = dict(
            vocab_size=VOCAB,
            hidden_size=HIDDEN,
            num_hidden_layers=LAYERS,
            num_attention_heads=HEADS,
            intermediate_size=FFN,
        )
    kwargs.update(max_position_embeddings=160)
    kwargs.update(FAMILIES.get(model_type, {}))
    kwargs.update(overrides)
    return AutoConfig.for_model(model_type, **kwargs)


def tiny_model(
    model_type: str,
    head: str = "base",
    *,
    num_labels: int = 2,
    attn_implementation: str | None = None,
    seed: int = 0,
    **overrides: Any,
):
    """A randomly initialised tiny model in eval mode (deterministic for a given seed)."""
    import transformers  # deferred: transformers takes seconds to import

    config = tiny_config(model_type, num_labels=num_labels, **overrides)
    if head not in available_heads(config):
        raise GhostifyError(f"transformers has no {head} head for {model_type} models")
    if num_labels == 1:
        config.problem_type = "regression"
    torch.manual_seed(seed)
    auto = getattr(transformers, HEAD_CLASSES[head])
    kwargs = {"attn_implementation": attn_implementation} if attn_implementation else {}
    model = auto.from_config(config, **kwargs)
    return model.eval()


def ships_head(model_type: str, head: str) -> bool:
    """Whether transformers has ``head`` for ``model_type`` (a test of every head skips the others)."""
    return head in available_heads(tiny_config(model_type))


def tiny_batch(batch_size: int = 3, seq_len: int = 9, *, seed: int = 0, padded: bool = True) -> dict[str, torch.Tensor]:
    """Random token ids with right padding of varying length (when ``padded``)."""
    generator = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(5, VOCAB, (batch_size, seq_len), generator=generator)
    mask = torch.ones_like(input_ids)
    if padded:
        for i in range(batch_size):
            length = seq_len - (i * 2) % (seq_len - 2)
            mask[i, length:] = 0
            input_ids[i, length:] = 0
    return {"input_ids": input_ids, "attention_mask": mask}


TOY_WORDS = ("the film was a story about people and places with music light time day night city sea road "
             "house friend work life world heart mind voice face hand eye plan game book song").split()


def write_toy_dataset(directory, *, train: int = 256, validation: int = 64, seed: int = 0, regression: bool = False):
    """A learnable text-classification (or regression) dataset as CSV files: the label says whether
    (or how often) the word "great" occurs. For fast end-to-end tests of the training commands."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    for split, n in (("train", train), ("validation", validation)):
        with (directory / f"{split}.csv").open("w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(["sentence", "label"])
            for _ in range(n):
                words = [rng.choice(TOY_WORDS) for _ in range(rng.randint(4, 12))]
                hits = rng.choice([0, 0, 1, 2]) if regression else rng.randint(0, 1)
                for _ in range(hits):
                    words.insert(rng.randrange(len(words) + 1), "great")
                writer.writerow([" ".join(words), float(hits) + 0.5 if regression else hits])
    return directory


def tiny_tokenizer(directory):
    """A word-level BERT tokenizer over the toy vocabulary, saved in ``directory``."""
    from transformers import BertTokenizer  # deferred: transformers' tokenizers take a while to import

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    # the word pieces last: a word like "films" splits into "film", "##s" (token classification)
    words = ["[PAD]", "[unused0]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "great", *TOY_WORDS, "##s", "##ing"]
    tokenizer = BertTokenizer(vocab={w: i for i, w in enumerate(words)}, do_lower_case=True)
    tokenizer.save_pretrained(str(directory))
    return tokenizer


def tiny_checkpoint(directory, model_type: str = "bert", head: str = "sequence-classification", **kwargs):
    """Save a tiny model of ``model_type`` with the toy tokenizer: a complete local checkpoint."""
    model = tiny_model(model_type, head, **kwargs)
    model.save_pretrained(str(directory))
    tiny_tokenizer(directory)
    return directory


# ----- datasets and models of the other task kinds ------------------------------------------------
NER_TAGS = ("O", "B-THING", "I-THING", "B-PLACE", "I-PLACE")
THINGS = ("film", "story", "music", "book", "song", "game")
PLACES = ("city", "sea", "road", "house", "world")


def write_toy_ner_dataset(directory, *, train: int = 128, validation: int = 32, seed: int = 0):
    """A learnable NER dataset (``tokens``, ``ner_tags`` as ClassLabel ids) saved with
    ``datasets.save_to_disk``: THING words after "the" are B-THING ("great" after them I-THING),
    PLACE words B-PLACE; some words ("great", "friend") split into several sub-words with the toy
    tokenizer's pieces."""
    import datasets

    datasets.disable_progress_bars()
    rng = random.Random(seed)
    names = list(NER_TAGS)
    features = datasets.Features({"tokens": datasets.Sequence(datasets.Value("string")),
                                  "ner_tags": datasets.Sequence(datasets.ClassLabel(names=names))})

    def row():
        tokens, tags = [], []
        for _ in range(rng.randint(3, 9)):
            choice = rng.random()
            if choice < 0.25:  # a plural ("films") is two sub-words
                tokens += ["the", rng.choice(THINGS) + ("s" if rng.random() < 0.5 else "")]
                tags += [0, 1]
                if rng.random() < 0.5:
                    tokens.append("great")
                    tags.append(2)
            elif choice < 0.4:
                tokens.append(rng.choice(PLACES))
                tags.append(3)
            else:
                tokens.append(rng.choice(TOY_WORDS))
                tags.append(0)
        return {"tokens": tokens, "ner_tags": tags}

    splits = {split: datasets.Dataset.from_list([row() for _ in range(n)], features=features)
              for split, n in (("train", train), ("validation", validation))}
    datasets.DatasetDict(splits).save_to_disk(str(directory))
    return Path(directory)


def write_toy_squad_dataset(directory, *, train: int = 96, validation: int = 24, seed: int = 0,
                            unanswerable: float = 0.25):
    """A SQuAD-layout dataset (``id``, ``question``, ``context``, ``answers``) saved with
    ``datasets.save_to_disk``: the question names a word, the answer is the word after it in the
    context; contexts are long enough (40-70 words) to need several windows at --max-length 32, and a
    fraction of the questions ask for a word the context does not have (empty answers, SQuAD v2)."""
    import datasets

    datasets.disable_progress_bars()
    rng = random.Random(seed)

    def row(i):
        words = [rng.choice(TOY_WORDS) for _ in range(rng.randint(40, 70))]
        if rng.random() < unanswerable:
            return {"id": str(i), "question": "what is after great", "context": " ".join(words),
                    "answers": {"text": [], "answer_start": []}}
        at = rng.randrange(len(words) - 1)
        words[at] = "great"
        context = " ".join(words)
        start = len(" ".join(words[: at + 1])) + 1
        return {"id": str(i), "question": "what is after great", "context": context,
                "answers": {"text": [words[at + 1]], "answer_start": [start]}}

    splits = {split: datasets.Dataset.from_list([row(i) for i in range(n)])
              for split, n in (("train", train), ("validation", validation))}
    datasets.DatasetDict(splits).save_to_disk(str(directory))
    return Path(directory)


def write_toy_pairs(directory, *, train: int = 64, validation: int = 48, seed: int = 0):
    """An STS-like pair dataset as CSV files (``sentence1``, ``sentence2``, float ``label`` 0-5:
    how many of the six words they share), for evaluating the embeddings task."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    for split, n in (("train", train), ("validation", validation)):
        with (directory / f"{split}.csv").open("w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(["sentence1", "sentence2", "label"])
            for _ in range(n):
                first = [rng.choice(TOY_WORDS) for _ in range(6)]
                shared = rng.randint(0, 5)
                second = first[:shared] + [rng.choice(TOY_WORDS) for _ in range(6 - shared)]
                writer.writerow([" ".join(first), " ".join(second), float(shared)])
    return directory


def write_toy_sentences(path, *, count: int = 128, seed: int = 0):
    """Unlabeled sentences, one per line, in a plain text file (the embeddings task's training data)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    path.write_text("".join(" ".join(rng.choice(TOY_WORDS) for _ in range(rng.randint(4, 12))) + "\n" for _ in range(count)))
    return path


def tiny_sentence_transformer(directory, model_type: str = "bert", *, pooling: str = "mean", normalize: bool = True,
                              **kwargs):
    """A tiny checkpoint with the sentence-transformers layout (``modules.json``, a pooling module
    and, with ``normalize``, a Normalize module)."""
    import json

    directory = Path(directory)
    tiny_checkpoint(directory, model_type, head="base", **kwargs)
    modules = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
               {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]
    if normalize:
        modules.append({"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"})
        (directory / "2_Normalize").mkdir(exist_ok=True)
    (directory / "modules.json").write_text(json.dumps(modules, indent=2))
    (directory / "1_Pooling").mkdir(exist_ok=True)
    modes = {f"pooling_mode_{m}": key == pooling for m, key in
             (("cls_token", "cls"), ("mean_tokens", "mean"), ("max_tokens", "max"), ("mean_sqrt_len_tokens", ""))}
    (directory / "1_Pooling" / "config.json").write_text(json.dumps({"word_embedding_dimension": HIDDEN, **modes}))
    (directory / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 128, "do_lower_case": False}))
    return directory
