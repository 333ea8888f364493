"""Slices before permutations (``tasks.slices``): attention's Q, K and V split out of one
projection, as timm's ViT (``reshape``, ``permute``, ``qkv[i]``) and GPT-2 (``split``) write
it, imported from ONNX at irregular sizes; the model keeps PyTorch's outputs."""
import math

import numpy as np
import pytest
import torch

from tensortune.frontend import from_onnx
from tensortune.tasks import build_model
from tensortune.tasks.graph import GraphOptions
from tensortune.tasks.slices import remaining_axes
from tensortune.workload import default_target


class PermutedQKV(torch.nn.Module):
    """timm's attention: 3 heads of 24 on 37 tokens."""

    def __init__(self, dim=72, heads=3):
        super().__init__()
        self.heads = heads
        self.qkv, self.proj = torch.nn.Linear(dim, 3 * dim), torch.nn.Linear(dim, dim)

    def forward(self, x):
        b, n, d = x.shape
        qkv = self.qkv(x).reshape(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(d // self.heads)
        out = torch.matmul(torch.softmax(scores, dim=-1), v)
        return self.proj(out.transpose(1, 2).reshape(b, n, d))


class SplitQKV(PermutedQKV):
    """GPT-2's attention: ``split`` along the features, then each part to heads."""

    def forward(self, x):
        b, n, d = x.shape
        q, k, v = (t.reshape(b, n, self.heads, d // self.heads).transpose(1, 2)
                   for t in self.qkv(x).split(d, dim=2))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(d // self.heads)
        out = torch.matmul(torch.softmax(scores, dim=-1), v)
        return self.proj(out.transpose(1, 2).reshape(b, n, d))


def test_remaining_axes_renumber_past_the_taken_one():
    # (3, b, heads, n, d) from (b, n, 3, heads, d); taking entry 0 (input axis 2) leaves
    # (b, heads, n, d) of the sliced (b, n, heads, d)
    assert remaining_axes([2, 0, 3, 1, 4], 0) == [0, 2, 1, 3]
    assert remaining_axes([1, 0, 2], 2) == [1, 0]


@pytest.mark.parametrize("module", [PermutedQKV, SplitQKV])
def test_qkv_slices_fuse_with_their_permutations_and_match(module, tmp_path):
    torch.manual_seed(0)
    net = module().eval()
    x = torch.randn(1, 37, 72)
    with torch.no_grad():
        expected = net(x).numpy()
    path = tmp_path / "attention.onnx"
    torch.onnx.export(net, (x,), str(path), opset_version=17, dynamo=False)
    model = from_onnx(path)
    target = default_target(2)
    compiled = build_model(model, target, {})
    names = list(compiled.functions)
    # no copy of the whole projection (a permutation, a split) nor a take of it is left: each
    # of Q, K, V is one strided-slice copy fused with its permutation
    assert not [n for n in names if n.startswith(("take", "split", "fused_reshape1_transpose"))]
    assert len([n for n in names if "strided_slice" in n and "transpose" in n]) == 3, names
    np.testing.assert_allclose(compiled.run(x.numpy())[0], expected, rtol=1e-4, atol=1e-5)
    # turned off, the same model keeps them and gives the same outputs
    plain = build_model(model, target, {}, graph=GraphOptions(slice_first=False))
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
