"""TinyBERT-style data augmentation with a masked language model (Jiao et al., 2020, Sec. 3.2).

For every text, each *replaceable* word — a single word-piece of the MLM's tokenizer, alphabetic,
not a stop word, within the first ``max_length`` tokens — is masked in its own copy of the text and
the MLM proposes its ``top_k`` most likely whole-word replacements. As in TinyBERT's reference code
the masked copy is paired with the unmasked text (``[CLS] masked [SEP] original [SEP]``), so the
prediction is conditioned on the original word: candidates stay close in meaning, which is what
keeps the label valid. Every new example then replaces each replaceable word with probability
``p`` by a uniformly chosen candidate.

The algorithm is split so that each part can be tested without a model or a CLI:

- :func:`find_words`: the replaceable words of a text (character spans, from the tokenizer's own
  pre-tokenisation and offsets, so it works for WordPiece, BPE and SentencePiece alike);
- :class:`CandidateProposer`: batched MLM predictions for many masked copies at once;
- :func:`sample_variants`: the seeded random replacement, a pure function.

Example:
    >>> import random
    >>> slots = [Slot(4, 9, "movie", ("film", "show"))]
    >>> sample_variants(("the movie",), (slots,), n=3, p=1.0, rng=random.Random(0))  # doctest: +SKIP
    [('the show',), ('the film',)]
"""

from __future__ import annotations

import copy
import random
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn

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


# ----------------------------------------------------------------------------------------------
# words
# ----------------------------------------------------------------------------------------------
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


# ----------------------------------------------------------------------------------------------
# candidates from the masked LM
# ----------------------------------------------------------------------------------------------
def candidate_vocabulary(tokenizer, vocab_size: int) -> tuple[torch.Tensor, list[str]]:
    """Which vocabulary entries may replace a word, and their text.

    A token qualifies when it is a whole word on its own: its text is alphabetic, not a stop word,
    not a special token, and tokenising ``"x " + text`` gives exactly that token after the anchor —
    which rules out continuation pieces ("##ing", BPE pieces without a leading space) for any
    tokenizer family without knowing its conventions. Returns a boolean mask over the MLM's
    ``vocab_size`` outputs (entries beyond the tokenizer's vocabulary are excluded) and the texts.
    """
    size = min(len(tokenizer), vocab_size)
    # the Rust tokenizer itself (30k calls through the wrapper cost seconds), as a copy without the
    # padding and truncation a tokenizer.json may carry
    backend = copy.deepcopy(tokenizer.backend_tokenizer)
    backend.no_padding()
    backend.no_truncation()
    texts = [t.strip() for t in backend.decode_batch([[i] for i in range(size)], skip_special_tokens=False)]
    anchor = backend.encode("x", add_special_tokens=False).ids
    special = set(tokenizer.all_special_ids)
    words = [i for i in range(size) if i not in special and texts[i].isalpha() and not is_stop_word(texts[i])]
    encoded = backend.encode_batch([f"x {texts[i]}" for i in words], add_special_tokens=False)
    flags = [False] * vocab_size
    for i, encoding in zip(words, encoded):
        flags[i] = encoding.ids == [*anchor, i]
    valid = torch.tensor(flags, dtype=torch.bool)
    return valid, texts + [""] * (vocab_size - size)


def match_case(candidate: str, word: str) -> str:
    """Give a lower-case candidate the case pattern of the word it replaces (UPPER, Title)."""
    if not candidate.islower():
        return candidate  # a cased vocabulary's own casing ("Paris") is kept
    if len(word) > 1 and word.isupper():
        return candidate.upper()
    if word[:1].isupper():
        return candidate[:1].upper() + candidate[1:]
    return candidate


class _GatherMasked:
    """Forward hook on the MLM's encoder that keeps only the hidden state at each row's mask.

    The MLM head is position-wise, so its logits then have shape (rows, 1, vocab) instead of
    (rows, length, vocab): for a 30k vocabulary and 64 rows of 250 tokens that is 7.8 MB instead
    of 2 GB, and it works for every family's head (BERT ``cls``, RoBERTa ``lm_head``, DistilBERT's
    three modules, ...) without naming it."""

    def __init__(self) -> None:
        self.positions: torch.Tensor | None = None

    def __call__(self, module, args, kwargs, output):
        hidden = output[0]
        rows = torch.arange(hidden.shape[0], device=hidden.device)
        gathered = hidden[rows, self.positions].unsqueeze(1)
        if isinstance(output, tuple):
            return (gathered, *output[1:])
        output["last_hidden_state"] = gathered
        return output


class CandidateProposer:
    """The masked LM's top-``k`` whole-word candidates for every replaceable word of many texts.

    All masked copies of a call's texts are sorted by length and run ``batch_size`` at a time, one
    forward pass per batch.

    Example:
        >>> proposer = CandidateProposer(mlm, tokenizer, top_k=15)        # doctest: +SKIP
        >>> slots = proposer.propose(["a gripping , moving film"])         # doctest: +SKIP
    """

    def __init__(
        self,
        model: nn.Module,
        tokenizer,
        *,
        top_k: int = 15,
        max_length: int = 128,
        batch_size: int = 64,
        device: torch.device | str = "cpu",
    ) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.top_k = top_k
        self.batch_size = batch_size
        self.device = torch.device(device)
        self.valid, self.texts = candidate_vocabulary(tokenizer, model.config.vocab_size)
        self.valid = self.valid.to(self.device)
        self.mask_id = tokenizer.mask_token_id
        single = len(tokenizer("a")["input_ids"]) - len(tokenizer("a", add_special_tokens=False)["input_ids"])
        pair = len(tokenizer("a", "a")["input_ids"]) - 2 * len(tokenizer("a", add_special_tokens=False)["input_ids"])
        positions = getattr(model.config, "max_position_embeddings", 512)
        limit = tokenizer.model_max_length if tokenizer.model_max_length < 100_000 else positions
        # "- 2": RoBERTa-style position ids start after the padding index
        self.max_model_length = min(limit, positions - 2)
        #: word-pieces of a text that are considered: the first max_length tokens (what a model
        #: trained with --max-length sees), and both halves of the pair must fit the MLM
        self.max_pieces = max(1, min(max_length - single, (self.max_model_length - pair) // 2))

    @torch.inference_mode()
    def propose(self, texts: Sequence[str]) -> list[list[Slot]]:
        """The slots (replaceable words with candidates) of each text; words with none are left out."""
        texts = list(texts)
        windows = truncate_to_pieces(self.tokenizer, texts, self.max_pieces)
        words = find_words(self.tokenizer, windows, max_pieces=self.max_pieces)
        copies = [(t, w) for t, text_words in enumerate(words) for w in text_words]
        # longest first, ties in text order: little padding, and an order that does not depend on
        # the batch size
        lengths = [len(windows[t]) for t, _ in copies]
        order = sorted(range(len(copies)), key=lambda c: (-lengths[c], c))
        found: dict[int, tuple[str, ...]] = {}
        for begin in range(0, len(order), self.batch_size):
            batch = [copies[c] for c in order[begin : begin + self.batch_size]]
            candidates = self._predict(
                [windows[t][: w.start] + self.tokenizer.mask_token + windows[t][w.end :] for t, w in batch],
                [windows[t] for t, _ in batch],
                [w.text for _, w in batch],
            )
            for c, cands in zip(order[begin : begin + self.batch_size], candidates):
                found[c] = cands
        slots: list[list[Slot]] = [[] for _ in texts]
        for c, (t, w) in enumerate(copies):
            if found.get(c):
                slots[t].append(Slot(w.start, w.end, w.text, found[c]))
        return slots

    def _predict(self, masked: list[str], originals: list[str], words: list[str]) -> list[tuple[str, ...]]:
        encoded = self.tokenizer(
            masked, originals, truncation=True, max_length=self.max_model_length, padding=True, return_tensors="pt"
        )
        encoded = {k: v.to(self.device) for k, v in encoded.items()}
        is_mask = encoded["input_ids"] == self.mask_id
        # exactly one mask per row: a text that itself contains the mask token's string gets none
        usable = (is_mask.sum(dim=1) == 1).tolist()
        gather = _GatherMasked()
        gather.positions = is_mask.int().argmax(dim=1)
        handle = self.model.base_model.register_forward_hook(gather, with_kwargs=True)
        try:
            logits = self.model(**encoded).logits[:, 0].float()
        finally:
            handle.remove()
        logits = logits.masked_fill(~self.valid, float("-inf"))
        # a few more than k: the word itself (and its other casings) are dropped below
        extra = min(logits.shape[-1], self.top_k + 4)
        values, indices = torch.topk(logits, extra, dim=-1)
        out = []
        for row, word in enumerate(words):
            if not usable[row]:
                out.append(())
                continue
            seen = {word.lower()}  # never the word itself, nor one word in two casings
            picked: list[str] = []
            for value, index in zip(values[row].tolist(), indices[row].tolist()):
                if value == float("-inf") or len(picked) == self.top_k:
                    break
                text = self.texts[index]
                if text.lower() not in seen:
                    seen.add(text.lower())
                    picked.append(text)
            out.append(tuple(picked))
        return out


# ----------------------------------------------------------------------------------------------
# sampling
# ----------------------------------------------------------------------------------------------
def example_rng(seed: int, index: int) -> random.Random:
    """The random stream of one example: independent of batching, chunking and other examples.

    ``random.Random`` seeded with a string hashes it with SHA-512, the same on every platform and
    Python version."""
    return random.Random(f"ghostify-augment:{seed}:{index}")


def replace_words(text: str, slots: Sequence[Slot], choices: Sequence[str | None]) -> str:
    """``text`` with each slot's word replaced by its choice (``None``: kept), case matched."""
    parts = []
    last = 0
    for slot, choice in zip(slots, choices):
        if choice is None:
            continue
        parts.append(text[last : slot.start])
        parts.append(match_case(choice, slot.word))
        last = slot.end
    parts.append(text[last:])
    return "".join(parts)


def sample_variants(
    texts: Sequence[str],
    slots: Sequence[Sequence[Slot]],
    *,
    n: int,
    p: float,
    rng: random.Random,
) -> list[tuple[str, ...]]:
    """Up to ``n`` new versions of one example (a tuple of its texts, e.g. a sentence pair).

    Each of the ``n`` draws replaces every slot of every text independently with probability ``p``
    by a uniformly chosen candidate. As in TinyBERT, a draw identical to the original or to an
    earlier draw is dropped (it would only re-weight that example), so fewer than ``n`` may come
    back — always for an example without slots. The random stream is consumed the same way
    whether or not a draw is kept.
    """
    seen = {tuple(texts)}
    variants: list[tuple[str, ...]] = []
    for _ in range(n):
        new = []
        for text, text_slots in zip(texts, slots):
            choices = []
            for slot in text_slots:
                replace = rng.random() < p
                choices.append(slot.candidates[rng.randrange(len(slot.candidates))] if replace else None)
            new.append(replace_words(text, text_slots, choices))
        variant = tuple(new)
        if variant not in seen:
            seen.add(variant)
            variants.append(variant)
    return variants
