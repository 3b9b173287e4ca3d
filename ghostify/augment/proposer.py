"""The masked LM's replacement candidates for every replaceable word of many texts, batched.

As in TinyBERT's reference code the masked copy is paired with the unmasked text
(``[CLS] masked [SEP] original [SEP]``), so the prediction is conditioned on the original word:
candidates stay close in meaning, which is what keeps the label valid."""

from __future__ import annotations

import copy
from collections.abc import Sequence

import torch
from torch import nn

from ..architectures import usable_positions
from .words import Slot, find_words, is_stop_word, truncate_to_pieces


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
        positions = usable_positions(model.config)  # the family's fact (RoBERTa-style offsets)
        limit = tokenizer.model_max_length if tokenizer.model_max_length < 100_000 else positions
        self.max_model_length = min(limit, positions)
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
