"""The reference store: the teacher's pre-computed token-level representations of the reference
set (its embedding-layer output and last-layer hidden states, float16, padding removed), the
reference set's token ids (to refit the retrieval map on a changed student), the index keys (the
teacher's sentence embeddings) and each entry's teacher-chosen neighbour."""

from __future__ import annotations

from dataclasses import dataclass, fields

import torch
from torch import nn
from torch.utils.data import DataLoader

from .search import masked_mean, nearest

STORE_DTYPE = torch.float16


@dataclass
class ReferenceStore:
    embeddings: torch.Tensor  # [T, Dt] teacher hidden_states[0], real tokens of all entries packed
    last: torch.Tensor  # [T, Dt] teacher hidden_states[-1]
    offsets: torch.Tensor  # [N + 1] entry i is tokens offsets[i]:offsets[i+1]
    input_ids: torch.Tensor  # [T]
    keys: torch.Tensor  # [N, Dt] teacher sentence embeddings (masked mean of the last layer)
    neighbours: torch.Tensor  # [N] teacher top-1 among the other entries
    token_type_ids: torch.Tensor | None = None  # [T] where the tokenizer makes them

    @property
    def entries(self) -> int:
        return len(self.offsets) - 1

    @property
    def tokens(self) -> int:
        return int(self.offsets[-1])

    def tensors(self) -> dict[str, torch.Tensor]:
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None}

    @classmethod
    def from_tensors(cls, tensors: dict[str, torch.Tensor]) -> "ReferenceStore":
        return cls(**{f.name: tensors.get(f.name) for f in fields(cls)})

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.tensors().values())


def gather(offsets: torch.Tensor, packed: list[torch.Tensor], index: torch.Tensor):
    """Entries ``index`` of packed token tensors, right-padded: ``([B, Lr, ...] per tensor, mask [B, Lr])``."""
    start, length = offsets[index], offsets[index + 1] - offsets[index]
    width = int(length.max()) if len(index) else 0
    steps = torch.arange(width, device=offsets.device)
    mask = steps[None, :] < length[:, None]
    positions = torch.where(mask, start[:, None] + steps[None, :], torch.zeros_like(steps)[None, :])
    out = []
    for tensor in packed:
        picked = tensor[positions] if len(tensor) else tensor.new_zeros((*positions.shape, *tensor.shape[1:]))
        out.append(picked * mask.view(*mask.shape, *([1] * (picked.dim() - 2))).to(picked.dtype))
    return out, mask


@torch.no_grad()
def build_store(teacher: nn.Module, rows, collate, *, batch_size: int = 64) -> ReferenceStore:
    """Run ``teacher`` once over ``rows`` (tokenised, in order) and keep what references need."""
    was_training = teacher.training
    teacher.eval()
    device = next(teacher.parameters()).device
    emb, last, ids, types, lengths, keys = [], [], [], [], [], []
    columns = [c for c in ("input_ids", "attention_mask", "token_type_ids") if c in rows.column_names]
    for batch in DataLoader(rows.select_columns(columns), batch_size=batch_size, shuffle=False, collate_fn=collate):
        batch = {k: v.to(device) for k, v in batch.items() if k in columns}
        out = teacher(**batch, output_hidden_states=True)
        mask = batch["attention_mask"].bool()
        first, final = out.hidden_states[0], out.hidden_states[-1]
        emb.append(first[mask].to(STORE_DTYPE).cpu())
        last.append(final[mask].to(STORE_DTYPE).cpu())
        ids.append(batch["input_ids"][mask].cpu())
        if "token_type_ids" in batch:
            types.append(batch["token_type_ids"][mask].cpu())
        lengths.append(mask.sum(1).cpu())
        keys.append(masked_mean(final, mask).cpu())
    teacher.train(was_training)
    lengths_all = torch.cat(lengths)
    offsets = torch.cat([torch.zeros(1, dtype=torch.long), lengths_all.cumsum(0)])
    keys_all = torch.nn.functional.normalize(torch.cat(keys), dim=-1)
    return ReferenceStore(
        embeddings=torch.cat(emb), last=torch.cat(last), offsets=offsets, input_ids=torch.cat(ids),
        keys=keys_all, neighbours=nearest(keys_all, keys_all, exclude_self=True),
        token_type_ids=torch.cat(types) if types else None,
    )
