"""The ghost convolution kinds (``--conv``, the paper's Table 5): one small strategy object each.

A kind states everything that differs between them: the shape of its weight, how many trailing
weight dimensions form one kernel (normalised together), whether padded tokens must be zeroed
before it convolves (the kinds that slide over the sequence), its centre tap for ``--init
center``, and the convolution itself. :class:`~ghostify.methods.ghost.modules.GhostConv` holds the
weight and picks how a forward pass runs (training, inference, a traced graph), then calls its kind.

Layouts. Linear outputs are (batch, seq, channels) in memory. A depthwise ``conv1d`` wants
(batch, channels, seq): transposing there and back costs two full copies and, on CPU, a slow
kernel for strided inputs. Instead the same tensor is viewed, without a copy, as a channels-last
(batch, channels, 1, seq) image and convolved with ``conv2d`` and a (1, k) kernel, which oneDNN
(CPU) and cuDNN (GPU) run natively in that layout; the output comes back in (batch, seq, channels).

In an ONNX export the depthwise kind becomes one ``Conv`` node over the same channels-last view,
between the two transposes of a (batch, channels, 1, seq) image, with the ReLU right after it:
ONNX Runtime fuses the transposes into its blocked-layout (NCHWc) reorders and the ReLU into the
convolution, so a module is five passes over (batch, seq, channels) (padding mask, reorder in,
convolution, reorder out, residual add) instead of about twelve as k shifted multiply-adds
(see ``benchmarks/bench_export.py``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Literal

import torch
import torch.nn.functional as F


#: how a forward pass writes the convolution, chosen once per pass by ``GhostConv.forward`` (plain
#: strings: an Enum member's lookup costs about 0.1 us, several times per module on the inference path)
Form = Literal["eager", "graph", "onnx"]
EAGER: Form = "eager"  # training and inference: the channels-last conv2d
GRAPH: Form = "graph"  # a traced graph (torch.export, torch.compile, TorchScript, ONNX "shifted")
ONNX: Form = "onnx"  # an ONNX export in the Conv form (modules.ONNX_DEPTHWISE = "conv")


class ConvKind(ABC):
    """One ``--conv`` kind. ``forward`` maps (batch, seq, parts, channels) inputs and the applied
    kernels ``w`` (shape :meth:`weight_shape`, normalised) to the activated ghost features, one per
    output and feature: (batch, seq, outputs, features, channels), or (batch, seq, 1, channels)
    when there is one of each; the caller sums the features."""

    name: str
    #: trailing weight dimensions that form one kernel (a softmax normalises over them together)
    kernel_dims: int
    #: whether padded tokens are zeroed before convolving: true for the kinds that slide over the
    #: sequence, so a padded batch looks to them like each sequence alone
    masks_padding: bool = True

    @abstractmethod
    def weight_shape(self, lead: tuple[int, int, int], channels: int, kernel_size: int) -> tuple[int, ...]:
        """The weight's shape: ``lead`` = (outputs, features, parts), then one kernel's."""

    def centre(self, kernel_size: int) -> tuple[int | str, ...]:
        """Where one kernel's centre tap is (indexing its last dims), for ``--init center``."""
        return (kernel_size // 2,)

    @abstractmethod
    def forward(self, x: torch.Tensor, w: torch.Tensor, *, relu: bool, form: Form) -> torch.Tensor:
        """The activated ghost features of ``x`` (see the class)."""

    def __repr__(self) -> str:
        return f"<ghost conv {self.name}>"


class Depthwise(ConvKind):
    """``dwconv``, weight (Q, F, P, C, k): channel c of part p slides a k-tap kernel over the sequence."""

    name, kernel_dims = "dwconv", 1

    def weight_shape(self, lead: tuple[int, int, int], channels: int, kernel_size: int) -> tuple[int, ...]:
        return (*lead, channels, kernel_size)

    def forward(self, x: torch.Tensor, w: torch.Tensor, *, relu: bool, form: Form) -> torch.Tensor:
        batch, length, parts, channels = x.shape
        q, f, _, _, k = w.shape
        # input channels ordered (channel, part), outputs (channel, output, feature): groups=C
        inp = x.reshape(batch, length, channels) if parts == 1 else x.transpose(2, 3).reshape(batch, length, -1)
        weight = w.permute(3, 0, 1, 2, 4).reshape(channels * q * f, parts, k)
        if form == ONNX:
            out = _onnx_depthwise(inp, weight, groups=channels, padding=k // 2, relu=relu)
        elif form == GRAPH and parts == 1:
            out = _activate(_shifted_sum(inp, weight, k // 2), relu)
        else:
            out = _activate(_conv_over_sequence(inp, weight, groups=channels, padding=k // 2), relu)
        if q * f == 1:  # (batch, seq, C) is already (batch, seq, 1, C): no transpose, no squeeze
            return out.reshape(batch, length, 1, channels)
        return out.reshape(batch, length, channels, q, f).permute(0, 1, 3, 4, 2)


class OverSequence(ConvKind):
    """``conv1d-seq``, weight (Q, F, P, C, C, k): a regular 1-D convolution over the sequence
    (out channels, in channels, k) that mixes all channels."""

    name, kernel_dims = "conv1d-seq", 2

    def weight_shape(self, lead: tuple[int, int, int], channels: int, kernel_size: int) -> tuple[int, ...]:
        return (*lead, channels, channels, kernel_size)

    def centre(self, kernel_size: int) -> tuple[int | str, ...]:
        # it mixes channels, so it peaks on each channel's own input (init_kernels' diagonal)
        return ("diagonal", kernel_size // 2)

    def forward(self, x: torch.Tensor, w: torch.Tensor, *, relu: bool, form: Form) -> torch.Tensor:
        batch, length, parts, channels = x.shape
        q, f, _, _, _, k = w.shape
        inp = x.reshape(batch, length, parts * channels)
        weight = w.permute(0, 1, 3, 2, 4, 5).reshape(q * f * channels, parts * channels, k)
        out = _conv_over_sequence(inp, weight, groups=1, padding=k // 2).reshape(batch, length, q, f, channels)
        return _activate(out, relu)


class OverFeatures(ConvKind):
    """``conv1d-feature``, weight (Q, F, P, k): each token's C features convolved with a k-tap
    kernel. Tokens never mix, so padding needs no mask."""

    name, kernel_dims, masks_padding = "conv1d-feature", 1, False

    def weight_shape(self, lead: tuple[int, int, int], channels: int, kernel_size: int) -> tuple[int, ...]:
        return (*lead, kernel_size)

    def forward(self, x: torch.Tensor, w: torch.Tensor, *, relu: bool, form: Form) -> torch.Tensor:
        batch, length, parts, channels = x.shape
        q, f, _, k = w.shape
        out = F.conv1d(x.reshape(batch * length, parts, channels), w.reshape(q * f, parts, k), padding=k // 2)
        return _activate(out.view(batch, length, q, f, channels), relu)


class OverPlane(ConvKind):
    """``conv2d``, weight (Q, F, P, k, k): a k x k kernel over the (sequence, feature) plane, the
    parts as input channels."""

    name, kernel_dims = "conv2d", 2

    def weight_shape(self, lead: tuple[int, int, int], channels: int, kernel_size: int) -> tuple[int, ...]:
        return (*lead, kernel_size, kernel_size)

    def centre(self, kernel_size: int) -> tuple[int | str, ...]:
        return (kernel_size // 2, kernel_size // 2)

    def forward(self, x: torch.Tensor, w: torch.Tensor, *, relu: bool, form: Form) -> torch.Tensor:
        batch, length, parts, channels = x.shape
        q, f, _, k, _ = w.shape
        out = F.conv2d(x.permute(0, 2, 1, 3), w.reshape(q * f, parts, k, k), padding=k // 2)
        return _activate(out.reshape(batch, q, f, length, channels).permute(0, 3, 1, 2, 4), relu)


#: the kinds by ``--conv`` name, in the order of ``settings.CONVS`` (which holds the names and help
#: without importing torch, for the CLI)
KINDS: dict[str, ConvKind] = {kind.name: kind for kind in (Depthwise(), OverSequence(), OverFeatures(), OverPlane())}


def _activate(out: torch.Tensor, relu: bool) -> torch.Tensor:
    # the convolution's output is fresh, so the ReLU may overwrite it
    return out.relu_() if relu else out


def _conv_over_sequence(x: torch.Tensor, weight: torch.Tensor, *, groups: int, padding: int) -> torch.Tensor:
    """Convolve (batch, seq, C_in) over seq with a (C_out, C_in / groups, k) kernel -> (batch, seq, C_out).

    (batch, seq, C) is the memory layout of a channels-last (batch, C, 1, seq) image, so no copy is
    made on the way in or out (see the module docstring)."""
    image = x.transpose(1, 2).unsqueeze(2)
    if not image.is_contiguous(memory_format=torch.channels_last):
        image = image.contiguous(memory_format=torch.channels_last)
    out = F.conv2d(image, weight.unsqueeze(2), padding=(0, padding), groups=groups)
    return out.squeeze(2).transpose(1, 2)


def _onnx_depthwise(x: torch.Tensor, weight: torch.Tensor, *, groups: int, padding: int, relu: bool) -> torch.Tensor:
    """The depthwise convolution of :func:`_conv_over_sequence`, followed by the ReLU, as an ONNX
    export writes it: (batch, seq, C_in) -> (batch, seq, C_out) through one grouped ``Conv``
    on the (batch, C_in, 1, seq) image. The two transposes are exactly the NHWC <-> NCHW pair that
    ONNX Runtime's NCHWc transformer folds into its layout reorders, and the ReLU must follow the
    ``Conv`` directly for ONNX Runtime to fuse it; so nothing may stand between them."""
    batch, length, channels = x.shape
    image = x.reshape(batch, 1, length, channels).permute(0, 3, 1, 2)  # a Reshape into the Mul's output: no copy
    out = F.conv2d(image, weight.unsqueeze(2), padding=(0, padding), groups=groups)
    if relu:
        out = out.relu()
    return out.permute(0, 2, 3, 1).reshape(batch, length, weight.shape[0])


def _shifted_sum(x: torch.Tensor, weight: torch.Tensor, padding: int) -> torch.Tensor:
    """The depthwise convolution of :func:`_conv_over_sequence` (one input channel per group) as k
    shifted multiply-adds in (batch, seq, channels): what a traced graph other than an ONNX export
    gets (``torch.compile`` fuses them into one kernel), and an ONNX export with ``ONNX_DEPTHWISE =
    "shifted"``. ONNX Runtime runs each as its own pass over memory.
    Output channel ``c * m + o`` is channel ``c``'s ``o``-th output, as in the grouped convolution."""
    batch, length, channels = x.shape
    kernel = weight.shape[-1]
    outputs = weight.shape[0] // channels
    w = weight.reshape(channels, outputs, kernel)
    padded = F.pad(x, (0, 0, padding, kernel - 1 - padding))
    if outputs == 1:
        out = padded[:, :length] * w[:, 0, 0]
        for j in range(1, kernel):
            out = out + padded[:, j:j + length] * w[:, 0, j]
        return out
    padded = padded.unsqueeze(-1)
    out = padded[:, :length] * w[:, :, 0]
    for j in range(1, kernel):
        out = out + padded[:, j:j + length] * w[:, :, j]
    return out.reshape(batch, length, channels * outputs)
