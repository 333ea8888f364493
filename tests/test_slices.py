"""Slices before permutations (``tasks.slices``): attention's Q, K and V split out of one
projection, as the zoo's ViT (``reshape``, ``permute``, ``qkv[i]``) and GPT-2 (``split``) write
it, imported from ONNX at irregular sizes (37 tokens, 3 heads of 24); the model keeps PyTorch's
outputs."""
import numpy as np
import pytest
import torch

from tensortune.frontend import from_onnx
from tensortune.tasks import build_model
from tensortune.tasks.graph import GraphOptions
from tensortune.tasks.slices import remaining_axes
from tensortune.workload import default_target
from tensortune.zoo.gpt2 import CausalSelfAttention, GPT2Config
from tensortune.zoo.vit import Attention


def _vit_attention():
    """timm's attention (``reshape``, ``permute``, ``qkv[i]``): 3 heads of 24."""
    return Attention(72, heads=3)


def _gpt2_attention():
    """GPT-2's (``split`` along the features, then each part to heads), causal: 3 heads of 24."""
    return CausalSelfAttention(GPT2Config(hidden=72, heads=3, max_positions=64))


def _takes_and_splits(mod) -> int:
    from tvm import relax

    found = []
    relax.analysis.post_order_visit(mod["main"], lambda e: found.append(e) if isinstance(
        e, relax.Call) and getattr(e.op, "name", "") in ("relax.take", "relax.split") else None)
    return len(found)


def test_remaining_axes_renumber_past_the_taken_one():
    # (3, b, heads, n, d) from (b, n, 3, heads, d); taking entry 0 (input axis 2) leaves
    # (b, heads, n, d) of the sliced (b, n, heads, d)
    assert remaining_axes([2, 0, 3, 1, 4], 0) == [0, 2, 1, 3]
    assert remaining_axes([1, 0, 2], 2) == [1, 0]


@pytest.mark.parametrize("module", [_vit_attention, _gpt2_attention])
def test_qkv_slices_fuse_with_their_permutations_and_match(module, tmp_path):
    torch.manual_seed(0)
    net = module().eval()
    x = torch.randn(1, 37, 72)
    with torch.no_grad():
        expected = net(x).numpy()
    path = tmp_path / "attention.onnx"
    torch.onnx.export(net, (x,), str(path), opset_version=17, dynamo=False)
    model = from_onnx(path)
    # sliced before constant folding, which (like the layout conversion) legalizes every take
    # it meets, and TVM warns for each one in fast mode
    early = GraphOptions().before_folding(model.mod)
    assert _takes_and_splits(model.mod) > 0 and _takes_and_splits(early) == 0
    target = default_target(2)
    # attention apart: fused (``tasks.attention``), it reads Q, K and V with no copy at all
    compiled = build_model(model, target, {}, graph=GraphOptions(attention=False))
    names = list(compiled.functions)
    # no copy of the whole projection (a permutation, a split) nor a take of it is left: each
    # of Q, K, V is one strided-slice copy fused with its permutation
    assert not [n for n in names if n.startswith(("take", "split", "fused_reshape1_transpose"))]
    assert len([n for n in names if "strided_slice" in n and "transpose" in n]) == 3, names
    np.testing.assert_allclose(compiled.run(x.numpy())[0], expected, rtol=1e-4, atol=1e-5)
    # turned off, the same model keeps them and gives the same outputs
    plain = build_model(model, target, {}, graph=GraphOptions(slice_first=False, attention=False))
    assert not [n for n in plain.functions if "strided_slice" in n]
    np.testing.assert_allclose(plain.run(x.numpy())[0], expected, rtol=1e-4, atol=1e-5)


def test_a_run_time_index_out_of_range_is_clipped_not_read_out_of_bounds(tmp_path):
    """An embedding's token ids come with the request: one past the vocabulary reads the last
    row (the imported ``fast`` take would read past the table), and a constant index (the
    last token) becomes a strided slice."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Embedding(50, 24), torch.nn.Linear(24, 8)).eval()
    tokens = torch.tensor([[3, 49, 0, 17, 5]])
    path = tmp_path / "embed.onnx"
    torch.onnx.export(net, (tokens,), str(path), opset_version=17, dynamo=False)
    compiled = build_model(from_onnx(path), default_target(2), {})
    assert not [n for n in compiled.functions if "strided_slice" in n]  # nothing constant
    with torch.no_grad():
        expected = net(torch.tensor([[3, 49, 0, 17, 49]])).numpy()
    got = compiled.run(np.array([[3, 49, 0, 17, 10_000]], dtype=np.int64))[0]
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
