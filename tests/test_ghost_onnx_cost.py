"""The ghost module's ONNX form (issue 23): one depthwise ``Conv`` that ONNX Runtime runs in its
blocked layout, with the same outputs as the eager module and a bounded number of graph nodes."""

from __future__ import annotations

import collections
import warnings
from pathlib import Path

import pytest
import torch
from torch import nn

from ghostify import steps
from ghostify.methods.ghost import modules
from ghostify.methods.ghost.modules import GhostConv
from ghostify.testing import tiny_checkpoint

pytestmark = pytest.mark.filterwarnings("ignore")
onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")


class _Module(nn.Module):
    def __init__(self, ghost: GhostConv) -> None:
        super().__init__()
        self.ghost = ghost

    def forward(self, x: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        return self.ghost(x, keep)


def _export(module: nn.Module, example: tuple[torch.Tensor, ...], path: Path) -> None:
    batch, length = torch.export.Dim("batch"), torch.export.Dim("sequence")
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, example, str(path), dynamo=True, input_names=["x", "keep"],
                          dynamic_shapes={"x": {0: batch, 1: length}, "keep": {0: batch, 1: length}})


def _random_weights(ghost: GhostConv) -> None:
    """Trained-looking kernels and scales: distinct taps, so a wrong shift or channel order shows."""
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for param in ghost.parameters():
            param.copy_(torch.randn(param.shape, generator=generator))


# (id, GhostConv keyword arguments, ONNX_DEPTHWISE): every shape the depthwise convolution takes
# (positions o/ffn2: parts = 1, --per-head: parts > 1, v: outputs > 1, --features) and the old form
PARITY = [
    ("default", {}, "conv"),
    ("per-head-features", {"parts": 3, "features": 2}, "conv"),
    ("value-outputs", {"parts": 2, "outputs": 3}, "conv"),
    ("no-relu-no-softmax-k5", {"relu": False, "softmax": False, "kernel_size": 5}, "conv"),
    ("zero-scale", {"init": "zero-scale"}, "conv"),
    ("old-shifted", {"features": 2}, "shifted"),
]


@pytest.mark.parametrize("kwargs,op", [c[1:] for c in PARITY], ids=[c[0] for c in PARITY])
def test_onnx_depthwise_matches_eager(tmp_path, monkeypatch, kwargs, op):
    channels = 16
    ghost = GhostConv(channels, **kwargs).eval()
    _random_weights(ghost)
    monkeypatch.setattr(modules, "ONNX_DEPTHWISE", op)
    parts = ghost.parts
    _export(_Module(ghost), (torch.randn(2, 7, parts, channels), torch.ones(2, 7)), tmp_path / "g.onnx")
    ops = collections.Counter(n.op_type for n in onnx.load(str(tmp_path / "g.onnx")).graph.node)
    if op == "conv":  # the new form: one Conv, no shifted copies
        assert ops["Conv"] == 1 and ops["Pad"] == 0 and ops["Slice"] == 0, ops
    else:
        assert ops["Conv"] == 0 and ops["Pad"] == 1, ops
    session = ort.InferenceSession(str(tmp_path / "g.onnx"), providers=["CPUExecutionProvider"])
    generator = torch.Generator().manual_seed(2)
    for batch, length in ((3, 11), (1, 4), (5, 1)):  # other shapes than the example, one token alone
        x = torch.randn(batch, length, parts, channels, generator=generator)
        keep = torch.ones(batch, length)
        keep[1:, length - 2:] = 0  # right padding
        keep[-1, :1] = 0  # and left padding in the last row
        with torch.no_grad():
            expected = ghost(x, keep)
        got = session.run(None, {"x": x.numpy(), "keep": keep.numpy()})[0]
        assert (torch.from_numpy(got) - expected).abs().max() < 1e-5


#: nodes that move data (ONNX Runtime runs Reshape, Squeeze, Unsqueeze and the shape arithmetic
#: as metadata, without touching the tensor) that one default ghost module (dwconv, after O or
#: FFN2) may add to the exported graph: the padding-mask Mul, the Transpose into the
#: (batch, C, 1, seq) image, Conv, Relu, the Transpose back and the residual Add: 6, of which ONNX
#: Runtime fuses the Relu into the Conv and the Transposes into its blocked-layout reorders. The old
#: form (3 shifted multiply-adds) added 12: Mul, Pad, 3 Slice, 3 Mul, 2 Add, Relu, Add.
DATA_NODES_PER_MODULE = 6
#: the padding mask as a float (Equal, Not, Cast), built once per graph and shared by every module
SHARED_MASK_NODES = 3
METADATA_OPS = {"Reshape", "Squeeze", "Unsqueeze", "Shape", "Concat", "Constant"}


def _data_nodes(path: Path) -> collections.Counter:
    return collections.Counter(n.op_type for n in onnx.load(str(path)).graph.node if n.op_type not in METADATA_OPS)


@pytest.mark.slow  # every day: ghosts' ONNX parity (test_export.py)
def test_export_of_a_ghost_module_is_one_conv_in_a_few_nodes(tmp_path):
    model = tiny_checkpoint(tmp_path / "dense", "bert")
    steps.prune(model, tmp_path / "pruned", width=0.5)
    steps.attach_ghost(tmp_path / "pruned", tmp_path / "ghost")  # the paper's default: o, ffn2
    steps.export(tmp_path / "pruned", tmp_path / "plain-onnx", format="onnx")
    result = steps.export(tmp_path / "ghost", tmp_path / "ghost-onnx", format="onnx", quantize="int8")
    assert result["max_difference"] <= 1e-4
    layers = _layers(tmp_path / "ghost")
    plain, ghost = _data_nodes(tmp_path / "plain-onnx" / "model.onnx"), _data_nodes(tmp_path / "ghost-onnx" / "model.onnx")
    assert ghost["Conv"] == 2 * layers and ghost["Pad"] == 0  # one Conv per module
    added = ghost.total() - plain.total()
    assert added <= DATA_NODES_PER_MODULE * 2 * layers + SHARED_MASK_NODES, ghost - plain
    int8 = onnx.load(str(tmp_path / "ghost-onnx" / "model_int8.onnx")).graph.node
    # int8: the depthwise convolutions stay fp32 Conv (ONNX Runtime's blocked kernel), not ConvInteger
    int8_ops = collections.Counter(n.op_type for n in int8)
    assert int8_ops["Conv"] == 2 * layers and int8_ops["ConvInteger"] == 0, int8_ops


def _layers(checkpoint: Path) -> int:
    import json

    return int(json.loads((checkpoint / "config.json").read_text())["num_hidden_layers"])
