"""Ghost modules: cheap convolutions that generate extra features from the remaining ones.

GhostBERT (Huang et al., ACL 2021) adds, after a projection whose output ``y`` is a sum of M head
(or FFN-fold) contributions ``H_h``, F ghost features::

    out = y + sum_f act( sum_h Conv(H_h, norm(W_fh)) )     norm = softmax over each kernel, act = ReLU

With one kernel shared by all heads (the default) the inner sum is ``Conv(y, norm(W_f))``, so the
default module is ``y + ReLU(DWConv(y, softmax(W)))`` with ``W`` of shape (d, k): d*k parameters.

The convolution kinds (``--conv``) and their memory layouts are in :mod:`.convs`.
:meth:`GhostConv.forward` is the one place that picks how a forward pass runs: in training the
convolution and ReLU are recomputed in backward (``torch.utils.checkpoint``), so a module keeps one
activation for backward instead of two; in inference the ReLU and the residual sum are done in
place in the convolution's output and the softmax of the kernels is cached; a traced graph writes
the depthwise convolution as one grouped ``Conv`` for an ONNX export (:data:`ONNX_DEPTHWISE`) or
as shifted multiply-adds for other traces.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from ...errors import GhostifyError
from ..grouped.modules import GroupedLinear
from .context import GhostContext, tracing
from .convs import EAGER, GRAPH, KINDS, ONNX, Form

#: how an ONNX export writes the depthwise ghost convolution: "conv" (one ``Conv`` node, see
#: :func:`.convs._onnx_depthwise`) or "shifted" (k shifted multiply-adds, :func:`.convs._shifted_sum`:
#: the export of ghostify <= 0.22, kept reachable for ``benchmarks/bench_export.py --ghost-op``'s comparison)
ONNX_DEPTHWISE = "conv"


class GhostConv(nn.Module):
    """Generate ``outputs`` x F ghost features from ``parts`` inputs of ``channels`` features each.

    ``forward`` maps (batch, seq, parts, channels) to (batch, seq, outputs, channels)::

        out[q] = sum_f act( sum_p Conv(x[p], norm(weight[q, f, p])) )

    ``weight`` shapes by ``conv`` (each kernel normalised over its own weights when ``softmax``;
    the kinds are :data:`.convs.KINDS`):

    * ``dwconv``         (Q, F, P, C, k):     channel c of part p slides a k-tap kernel over the sequence
    * ``conv1d-seq``     (Q, F, P, C, C, k):  a regular 1-D convolution over the sequence (out, in, k)
    * ``conv1d-feature`` (Q, F, P, k):        each token's C features convolved with a k-tap kernel
    * ``conv2d``         (Q, F, P, k, k):     a k x k kernel over the (sequence, feature) plane

    Padded tokens (``keep`` = 0) are zeroed before a convolution that mixes tokens.
    """

    def __init__(
        self,
        channels: int,
        *,
        kernel_size: int = 3,
        conv: str = "dwconv",
        softmax: bool = True,
        relu: bool = True,
        features: int = 1,
        parts: int = 1,
        outputs: int = 1,
        init: str = "uniform",
        device: torch.device | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.channels, self.kernel_size, self.conv, self.init = channels, kernel_size, conv, init
        self.kind = KINDS[conv]
        self.softmax, self.relu = softmax, relu
        self.features, self.parts, self.outputs = features, parts, outputs
        shape = self.kind.weight_shape((outputs, features, parts), channels, kernel_size)
        self.weight = nn.Parameter(torch.empty(shape, device=device, dtype=dtype))
        # init "zero-scale" (not in the paper): a per-channel output scale that starts at zero
        self.scale = nn.Parameter(torch.empty(outputs, channels, device=device, dtype=dtype)) if init == "zero-scale" else None
        self.reset_parameters()

    def reset_parameters(self, generator: torch.Generator | None = None) -> None:
        init_kernels(self.weight, self.kind.kernel_dims, softmax=self.softmax, generator=generator,
                     centre=self.kind.centre(self.kernel_size) if self.init == "center" else None)
        if self.scale is not None:
            nn.init.zeros_(self.scale)

    def kernel(self, form: Form | None = None) -> torch.Tensor:
        """The weights as applied: softmax-normalised over each kernel, or as they are. ``form``:
        the pass's, when known (it saves asking again whether the pass is traced)."""
        if not self.softmax:
            return self.weight
        return _cached_softmax(self, self.kind.kernel_dims, traced=None if form is None else form != EAGER)

    def forward(self, x: torch.Tensor, keep: torch.Tensor | None = None,
                residual: torch.Tensor | None = None) -> torch.Tensor:
        """The ghosts of ``x`` (see the class), or with ``residual`` (batch, seq, d) the sum
        ``residual + ghosts`` in its shape. The one place that picks how a pass runs (trace, train,
        infer); the convolution itself is the kind's (:data:`.convs.KINDS`)."""
        # trace (torch.export, torch.compile, TorchScript, ONNX): a graph that serves every batch. An
        # ONNX export writes the depthwise kernel as one grouped Conv with its ReLU, other traces as
        # shifted multiply-adds that their compiler fuses; the residual sum is then the infer one
        form = (ONNX if _onnx_conv() else GRAPH) if tracing() else EAGER
        if residual is None:  # position v: a matmul takes the ghosts and keeps them for backward anyway
            return self._ghosts(x, keep, form)
        if torch.is_grad_enabled() and (residual.requires_grad or self.weight.requires_grad):
            # train: recompute the (memory-bound) convolution and ReLU in backward rather than keep
            # its output; the module then holds one activation (its input) instead of two
            return residual + checkpoint(self._ghosts, x, keep, form, use_reentrant=False).reshape(residual.shape)
        # infer: the ghosts are a fresh tensor (the convolution's output), so the sum reuses it
        return self._ghosts(x, keep, form).reshape(residual.shape).add_(residual)

    def _ghosts(self, x: torch.Tensor, keep: torch.Tensor | None, form: Form) -> torch.Tensor:
        if keep is not None and self.kind.masks_padding:
            x = x * keep[:, :, None, None]
        out = self.kind.forward(x, self.kernel(form), relu=self.relu, form=form)
        if out.dim() == 5:  # (batch, seq, outputs, features, channels): sum the features
            out = out.sum(3) if self.features > 1 else out.squeeze(3)
        return out * self.scale if self.scale is not None else out

    def extra_repr(self) -> str:
        return (
            f"{self.conv}, channels={self.channels}, kernel_size={self.kernel_size}, softmax={self.softmax}, "
            f"relu={self.relu}, features={self.features}, parts={self.parts}, outputs={self.outputs}"
            + (f", init={self.init}" if self.init != "uniform" else "")
        )


def _onnx_conv() -> bool:
    """Whether this forward pass is an ONNX export that takes the ``Conv`` form (other traces, such
    as ``torch.compile``, fuse the shifted multiply-adds themselves)."""
    return ONNX_DEPTHWISE == "conv" and torch.onnx.is_in_onnx_export()


def _cached_softmax(module: nn.Module, kernel_dims: int, *, traced: bool | None = None) -> torch.Tensor:
    """softmax(weight) over each kernel's last ``kernel_dims`` dims. With autograd off (inference)
    the result is cached until the weight changes (its version counter or storage), which saves
    one operation per module and forward pass; with autograd on it is always recomputed.
    ``traced``: whether the pass is traced, when the caller knows (asking costs a microsecond)."""
    weight = module.weight
    flat = weight.flatten(-kernel_dims) if kernel_dims > 1 else weight
    if torch.is_grad_enabled() or (tracing() if traced is None else traced):  # training, or a graph: compute it
        return flat.softmax(-1).view_as(weight)
    key = (weight._version, weight.data_ptr(), weight.dtype, weight.device)
    cached = module.__dict__.get("_kernel_cache")
    if cached is not None and cached[0] == key:
        return cached[1]
    kernel = flat.softmax(-1).view_as(weight)
    module.__dict__["_kernel_cache"] = (key, kernel)
    return kernel


#: init "center": the share of each first kernel's weight on its centre tap
CENTRE_WEIGHT = 0.9


def init_kernels(
    weight: torch.Tensor,
    kernel_dims: int,
    *,
    softmax: bool,
    lead: int = 2,
    generator: torch.Generator | None = None,
    centre: tuple | None = None,
) -> None:
    """Initialise ghost kernels (``weight``'s first ``lead`` dims index outputs and features).

    The kernels at index 0 of those dims (the first ghost feature) start as the uniform average
    over their window: zero logits under softmax, the weights 1/window without it. With ``centre``
    (init "center", ``ConvKind.centre``) they start peaked instead: the centre tap holds
    :data:`CENTRE_WEIGHT` of the weight and the other taps share the rest, so the module starts
    close to ``y + ReLU(y)``. Every further feature/output starts from standard-normal logits,
    because identical kernels would receive identical gradients and never become different
    features. Without softmax the weights are the values the softmax would give, so both
    parametrisations start from the same function."""
    with torch.no_grad():
        logits = torch.zeros(weight.shape, dtype=torch.float32)
        if math.prod(weight.shape[:lead]) > 1:
            logits = torch.randn(weight.shape, generator=generator, dtype=torch.float32)
            logits[(0,) * lead] = 0.0
        if centre is not None:
            first = logits[(0,) * lead]  # the first feature's kernels: (..., *kernel dims), a view
            size = math.prod(weight.shape[-kernel_dims:])
            if size > 1:  # softmax weight CENTRE_WEIGHT on one of `size` logits: e^L / (e^L + size - 1)
                peak = math.log(CENTRE_WEIGHT * (size - 1) / (1 - CENTRE_WEIGHT))
                if centre[0] == "diagonal":  # (..., C_out, C_in, k): channel c's own input at the middle tap
                    channels = weight.shape[-2]
                    first[..., range(channels), range(channels), centre[1]] = peak
                else:
                    first[(Ellipsis, *centre)] = peak
        if not softmax:
            flat = logits.flatten(-kernel_dims) if kernel_dims > 1 else logits
            logits = flat.softmax(-1).view_as(logits)
        weight.copy_(logits.to(device=weight.device, dtype=weight.dtype))


class GhostMapConv(nn.Module):
    """Position ``qk``: a k x k Conv2D over each head's (query, key) attention-score map.

    ``scores + sum_f act(Conv2D(scores_h, norm(weight[h, f])))``, with one kernel per feature
    shared by all heads (``weight`` (1, F, k, k)) or one per head (``(M, F, k, k)``). Padded query
    rows and key columns are zeroed before convolving; the additive attention mask applied after
    keeps padded keys out of the softmax as before.
    """

    def __init__(
        self,
        heads: int,
        *,
        kernel_size: int = 3,
        softmax: bool = True,
        relu: bool = True,
        features: int = 1,
        init: str = "uniform",
        context: GhostContext | None = None,
        device: torch.device | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.heads, self.kernel_size, self.softmax, self.relu, self.features = heads, kernel_size, softmax, relu, features
        self.init = init
        self.context = context  # the padding mask of the forward pass (add_scores)
        self.weight = nn.Parameter(torch.empty(heads, features, kernel_size, kernel_size, device=device, dtype=dtype))
        self.scale = nn.Parameter(torch.empty(heads, device=device, dtype=dtype)) if init == "zero-scale" else None
        self.reset_parameters()

    def reset_parameters(self, generator: torch.Generator | None = None) -> None:
        # (features, heads, k, k) view: feature 0 starts uniform (or centred) for every head, the others random
        centre = KINDS["conv2d"].centre(self.kernel_size) if self.init == "center" else None
        init_kernels(self.weight.transpose(0, 1), 2, softmax=self.softmax, lead=1, generator=generator, centre=centre)
        if self.scale is not None:
            nn.init.zeros_(self.scale)

    def kernel(self) -> torch.Tensor:
        if not self.softmax:
            return self.weight
        return _cached_softmax(self, 2)

    def forward(self, scores: torch.Tensor, keep: torch.Tensor | None = None) -> torch.Tensor:
        batch, heads, length, _ = scores.shape
        x = scores
        if keep is not None:
            x = x * (keep[:, None, :, None] * keep[:, None, None, :])
        w, k, f = self.kernel(), self.kernel_size, self.features
        if self.heads == 1:
            out = F.conv2d(x.reshape(batch * heads, 1, length, length), w.reshape(f, 1, k, k), padding=k // 2)
        else:
            out = F.conv2d(x, w.reshape(heads * f, 1, k, k), padding=k // 2, groups=heads)
        out = out.view(batch, heads, f, length, length)
        if self.relu:
            out = out.relu_()
        out = out.sum(2) if f > 1 else out.squeeze(2)
        if self.scale is not None:
            out = out * self.scale[:, None, None]
        return scores + out

    def add_scores(self, scores: torch.Tensor) -> torch.Tensor:
        """The attention kernel's score hook: the ghost maps of ``scores``, padding from the context."""
        batch, _, length, _ = scores.shape
        return self(scores, self.context.keep(scores, batch, length) if self.context is not None else None)

    def extra_repr(self) -> str:
        return f"heads={self.heads}, kernel_size={self.kernel_size}, softmax={self.softmax}, relu={self.relu}, features={self.features}"


class GhostValue(nn.Module):
    """Position ``v``: regenerate the N_H - M pruned heads' values from the M kept ones.

    ``ghost[q] = sum_f act(sum_h Conv(V_h, norm(W_qfh)))`` (shared kernels: ``Conv(sum_h V_h, ...)``).
    A ghost head has no query and key of its own: it is mixed over the sequence by the mean of
    the kept heads' attention probabilities, and enters the output projection through new columns
    (:class:`GhostColumns`) that start at zero.
    """

    def __init__(self, conv: GhostConv, context: GhostContext) -> None:
        super().__init__()
        self.conv = conv
        self.context = context  # plain attribute: shared, not a submodule

    def forward(self, value: torch.Tensor, probs: torch.Tensor) -> torch.Tensor:
        """(batch, M, seq, head_size) values and (batch, M, seq, seq) probabilities ->
        (batch, N_H - M, seq, head_size) ghost-head contexts."""
        batch, _heads, length, size = value.shape
        keep = self.context.keep(value, batch, length)
        parts = value.transpose(1, 2) if self.conv.parts > 1 else value.sum(1).unsqueeze(2)
        ghosts = self.conv(parts, keep)  # (batch, seq, Q, head_size)
        q = ghosts.shape[2]
        mixed = torch.matmul(probs.mean(1), ghosts.reshape(batch, length, q * size))
        return mixed.view(batch, length, q, size).transpose(1, 2)


class GhostColumns(nn.Module):
    """The output projection's columns for the ghost value heads (position ``v``), zero at first."""

    def __init__(self, out_features: int, in_features: int, device=None, dtype=None) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(out_features, in_features, device=device, dtype=dtype))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight)

    def extra_repr(self) -> str:
        return f"in_features={self.weight.shape[1]}, out_features={self.weight.shape[0]}"


class GhostLinear(nn.Linear):
    """A projection followed by its ghost features (positions ``o``, ``ffn1``, ``ffn2``).

    It *is* the original ``nn.Linear`` (same ``weight``/``bias`` parameters and state-dict keys,
    same ``in_features``/``out_features``), so code that reads a projection's weights keeps
    working; the ghost parameters live in the children ``ghost`` (and ``ghost_heads`` for ``v``).

    With ``parts`` = M > 1 (``--per-head``) the projection is computed as the sum of its M
    per-head (or per-fold) products ``H_h`` (the bias shared equally), and each gets its own kernel.
    """

    def __init__(
        self,
        base: nn.Linear,
        context: GhostContext,
        ghost: GhostConv | None = None,
        *,
        parts: int = 1,
        ghost_heads: GhostColumns | None = None,
    ) -> None:
        nn.Module.__init__(self)  # not nn.Linear.__init__: the parameters are the base layer's own
        self.in_features, self.out_features = base.in_features, base.out_features
        self.weight = base.weight
        self.bias = base.bias
        self.ghost = ghost
        self.ghost_heads = ghost_heads
        self.parts = parts
        self.context = context
        self.training = base.training

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() != 3:
            raise RuntimeError(f"a ghost projection needs (batch, seq, features) inputs, got shape {tuple(x.shape)}")
        extra = None
        if self.ghost_heads is not None:
            x, extra = x[..., : self.in_features], x[..., self.in_features :]
        batch, length, _ = x.shape
        parts = None
        if self.ghost is not None and self.parts > 1:
            parts = self._per_part(x)
            y = parts.sum(2)
        else:
            y = self._project(x)
        if extra is not None:
            y = y + self.ghost_heads(extra)
        if self.ghost is None:
            return y
        keep = self.context.keep(y, batch, length)
        inp = parts if parts is not None else y.view(batch, length, 1, self.out_features)
        return self.ghost(inp, keep, y)  # y + ghosts (GhostConv.forward: train, infer, trace)

    def _project(self, x: torch.Tensor) -> torch.Tensor:
        """The wrapped projection (a grouped one overrides this)."""
        return F.linear(x, self.weight, self.bias)

    def _per_part(self, x: torch.Tensor) -> torch.Tensor:
        """(batch, seq, in) -> (batch, seq, parts, out): each head's (or FFN fold's) contribution."""
        p = self.parts
        size = math.ceil(self.in_features / p)
        weight = self.weight
        if size * p != self.in_features:  # uneven folds: the last ones are shorter (zero-padded)
            x = F.pad(x, (0, size * p - self.in_features))
            weight = F.pad(weight, (0, size * p - self.in_features))
        batch, length, _ = x.shape
        h = torch.einsum("btps,dps->btpd", x.reshape(batch, length, p, size), weight.view(self.out_features, p, size))
        if self.bias is not None:
            h = h + self.bias / p
        return h

    def extra_repr(self) -> str:
        text = super().extra_repr()
        return text + (f", parts={self.parts}" if self.parts > 1 else "")


class GhostGroupedLinear(GhostLinear):
    """A grouped projection (``ghostify group-linear``) followed by its ghost features: the same
    parameters, index buffers and state-dict keys as the :class:`~ghostify.methods.grouped.GroupedLinear`
    it wraps. One kernel for the whole output only (a per-head split of a block-diagonal weight
    is not defined)."""

    def __init__(self, base, context: GhostContext, ghost: GhostConv | None = None, *, parts: int = 1,
                 ghost_heads: GhostColumns | None = None) -> None:
        if parts > 1:
            raise GhostifyError(
                "--per-head splits a projection's weight by heads, which a grouped projection (group-linear) does not "
                "have; attach-ghost without --per-head, or group fewer --modules"
            )
        super().__init__(base, context, ghost, parts=parts, ghost_heads=ghost_heads)
        self.groups = base.groups
        self.shared_gather = base.shared_gather
        self.register_buffer("input_index", base.input_index)
        self.register_buffer("output_index", base.output_index)

    def _project(self, x: torch.Tensor) -> torch.Tensor:
        return GroupedLinear.forward(self, x)

    def extra_repr(self) -> str:
        return super().extra_repr() + f", groups={self.groups}"


def ghost_projection(base: nn.Module, context: GhostContext, ghost: GhostConv | None = None, *, parts: int = 1,
                     ghost_heads: GhostColumns | None = None) -> GhostLinear:
    """The ghost wrapper for a dense or a grouped projection."""
    if isinstance(base, GroupedLinear):
        return GhostGroupedLinear(base, context, ghost, parts=parts, ghost_heads=ghost_heads)
    return GhostLinear(base, context, ghost, parts=parts, ghost_heads=ghost_heads)
