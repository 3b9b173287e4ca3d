"""The words augmentation may replace: a single word-piece of the MLM's tokenizer, alphabetic, not a
stop word, within the first ``max_length`` tokens (TinyBERT's rule), found with the tokenizer's own
pre-tokenisation and offsets, so that it works for WordPiece, BPE and SentencePiece alike."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

#: NLTK's English stop-word list (``nltk.corpus.stopwords.words("english")``, 179 words, as shipped
#: with nltk_data since 2018), reproduced so that no download is needed, plus the two entries
#: TinyBERT's ``data_augmentation.py`` adds ("'s", "'re"; relevant for BPE tokenizers, which keep the
#: apostrophe with the word). Stop words are never replaced and never proposed as replacements:
#: negations ("not", "no", "nor", "don't") are in the list, so augmentation cannot add or remove one.
STOP_WORDS: frozenset[str] = frozenset(
    """
    i me my myself we our ours ourselves you you're you've you'll you'd your yours yourself yourselves
    he him his himself she she's her hers herself it it's its itself they them their theirs themselves
    what which who whom this that that'll these those am is are was were be been being have has had
    having do does did doing a an the and but if or because as until while of at by for with about
    against between into through during before after above below to from up down in out on off over
    under again further then once here there when where why how all any both each few more most other
    some such no nor not only own same so than too very s t can will just don don't should should've
    now d ll m o re ve y ain aren aren't couldn couldn't didn didn't doesn doesn't hadn hadn't hasn
    hasn't haven haven't isn isn't ma mightn mightn't mustn mustn't needn needn't shan shan't shouldn
    shouldn't wasn wasn't weren weren't won won't wouldn wouldn't 's 're
    """.split()
)

#: TinyBERT's augmentation factor N per GLUE task (its ``data_augmentation.py``); 30 otherwise.
TINYBERT_PER_EXAMPLE: dict[str, int] = {"sst2": 20, "qnli": 20, "mnli": 10, "qqp": 10}
DEFAULT_PER_EXAMPLE = 30


def default_per_example(task: str | None) -> int:
    """TinyBERT's N for ``task``: 20 for SST-2/QNLI, 10 for MNLI/QQP, 30 for the small tasks."""
    return TINYBERT_PER_EXAMPLE.get(task or "", DEFAULT_PER_EXAMPLE)


def is_stop_word(word: str) -> bool:
    word = word.lower().replace("\u2019", "'")
    return word in STOP_WORDS or word.lstrip("'") in STOP_WORDS


@dataclass(frozen=True)
class Word:
    """A replaceable word of a text: its character span and the index of its single word-piece."""

    start: int
    end: int
    text: str
    piece: int  # index among the text's tokens (without special tokens)


@dataclass(frozen=True)
class Slot:
    """A replaceable word with the MLM's candidates for it (most likely first)."""

    start: int
    end: int
    word: str
    candidates: tuple[str, ...]


def find_words(tokenizer, texts: Sequence[str], *, max_pieces: int) -> list[list[Word]]:
    """The replaceable words of each text, in order.

    Words come from the tokenizer's own pre-tokenisation (``word_ids`` and character offsets), so
    "movie's" is "movie", "'", "s" for BERT. A word is replaceable when it is a single word-piece
    (not [UNK]) among the first ``max_pieces`` pieces, alphabetic, and not a stop word. Multi-piece
    words are kept unchanged: TinyBERT replaced them with GloVe neighbours, which ghostify does not
    ship.
    """
    if not texts:
        return []
    encoded = tokenizer(list(texts), add_special_tokens=False, return_offsets_mapping=True)
    unk = tokenizer.unk_token_id
    result = []
    for i, text in enumerate(texts):
        ids = encoded["input_ids"][i]
        offsets = encoded["offset_mapping"][i]
        groups: dict[int, list[int]] = {}
        for position, word_id in enumerate(encoded.word_ids(i)):
            if word_id is not None:
                groups.setdefault(word_id, []).append(position)
        words = []
        for positions in groups.values():
            if len(positions) != 1:
                continue  # several word-pieces: kept unchanged (see the docstring)
            piece = positions[0]
            if piece >= max_pieces or ids[piece] == unk:
                continue
            start, end = offsets[piece]
            word = text[start:end]
            if word.isalpha() and not is_stop_word(word):
                words.append(Word(start, end, word, piece))
        result.append(words)
    return result


def truncate_to_pieces(tokenizer, texts: Sequence[str], max_pieces: int) -> list[str]:
    """Each text cut after its first ``max_pieces`` word-pieces (the part any model will see)."""
    if not texts:
        return []
    encoded = tokenizer(list(texts), add_special_tokens=False, return_offsets_mapping=True)
    out = []
    for text, offsets in zip(texts, encoded["offset_mapping"]):
        out.append(text if len(offsets) <= max_pieces else text[: offsets[max_pieces - 1][1]])
    return out
