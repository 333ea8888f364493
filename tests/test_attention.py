"""Fused attention (``tasks.attention``, ``space.cpu_attention``): the rewrite on the attention
of a ViT (one projection, reshape, permute, ``qkv[i]``), of GPT-2 (``split``, a causal mask),
and of a BERT-style encoder (three projections, a scale on Q, an additive mask that comes with
the request), imported from ONNX at irregular sizes (37 tokens, 3 heads of 24); the models keep
PyTorch's outputs, and every seed and sampled config of the template computes the same."""
import math

import numpy as np
import pytest
import torch

from tensortune.frontend import from_onnx
from tensortune.space import task_seeds, task_space
from tensortune.tasks import build_model, extract_tasks
from tensortune.tasks.graph import GraphOptions
from tensortune.workload import default_target
from tensortune.zoo.gpt2 import CausalSelfAttention, GPT2Config
from tensortune.zoo.vit import Attention

from .template_checks import matching_configs

TOKENS, DIM, HEADS = 37, 72, 3


class MaskedAttention(torch.nn.Module):
    """BERT's: Q, K, V from three projections, Q scaled before its product, and the padding
    mask of the request added to the scores."""

    def __init__(self):
        super().__init__()
        self.q, self.k, self.v = (torch.nn.Linear(DIM, DIM) for _ in range(3))

    def forward(self, x, mask):
        b, n, _ = x.shape

        def heads(t):
            return t.reshape(b, n, HEADS, DIM // HEADS).permute(0, 2, 1, 3)

        q = heads(self.q(x)) * (1 / math.sqrt(DIM // HEADS))
        scores = q @ heads(self.k(x)).transpose(-1, -2) + (1 - mask[:, None, None, :]) * -1e4
        out = torch.softmax(scores, dim=-1) @ heads(self.v(x))
        return out.permute(0, 2, 1, 3).reshape(b, n, DIM)


class ScoresToo(torch.nn.Module):
    """Attention whose probabilities are also an output: they must be written out, so the
    rewrite leaves it alone."""

    def forward(self, q, k, v):
        probs = torch.softmax(q @ k.transpose(-1, -2), dim=-1)
        return probs @ v, probs


def _inputs(name):
    torch.manual_seed(0)
    x = torch.randn(1, TOKENS, DIM)
    if name == "vit":  # two layers: equal attentions share a function, not their inputs
        return torch.nn.Sequential(Attention(DIM, heads=HEADS), Attention(DIM, heads=HEADS)), (x,)
    if name == "gpt2":
        return CausalSelfAttention(GPT2Config(hidden=DIM, heads=HEADS, max_positions=64)), (x,)
    if name == "masked":
        mask = torch.ones(1, TOKENS)
        mask[0, -5:] = 0  # five padding tokens
        return MaskedAttention(), (x, mask)
    q, k, v = (torch.randn(1, HEADS, TOKENS, DIM // HEADS) for _ in range(3))
    return ScoresToo(), (q, k, v)


@pytest.fixture(scope="module", params=["vit", "gpt2", "masked"])
def imported(request, tmp_path_factory):
    net, args = _inputs(request.param)
    net = net.eval()
    with torch.no_grad():
        expected = net(*args).numpy()
    path = tmp_path_factory.mktemp("attention") / f"{request.param}.onnx"
    torch.onnx.export(net, args, str(path), opset_version=17, dynamo=False)
    return from_onnx(path), [a.numpy() for a in args], expected


def test_attention_becomes_one_function_and_the_model_still_matches(imported):
    model, inputs, expected = imported
    target = default_target(2)
    tasks = extract_tasks(model, target)
    fused = [t for t in tasks if t.name.startswith("attention")]
    assert len(fused) == 1 and fused[0].tunable, [t.describe() for t in tasks]
    # no softmax, no Q Kᵀ and no copy of Q, K or V is left beside it
    assert not [t.name for t in tasks if "softmax" in t.name or "strided_slice" in t.name]
    best = {fused[0].key: task_seeds(fused[0].task)[0]}
    compiled = build_model(model, target, best)
    assert set(fused[0].functions) <= set(compiled.tuned)
    np.testing.assert_allclose(compiled.run(*inputs)[0], expected, rtol=1e-4, atol=1e-5)
    # turned off, softmax is a function of its own again, with the same outputs
    plain = build_model(model, target, {}, graph=GraphOptions(attention=False))
    assert any("softmax" in n for n in plain.functions)
    np.testing.assert_allclose(plain.run(*inputs)[0], expected, rtol=1e-4, atol=1e-5)


def test_every_seed_and_sampled_config_computes_the_same_result(imported):
    """37 tokens (40 rows, 48 columns padded) and heads of 24: seeds and random configs either
    refuse with ``InvalidConfigError`` or match the unscheduled function."""
    model, _, _ = imported
    task = next(t for t in extract_tasks(model, default_target(2))
                if t.name.startswith("attention"))
    space = task_space(task.task)
    assert {k.name for k in space.knobs} == {"rows", "score_cols", "out_cols", "parallel",
                                             "unroll"}
    configs = task_seeds(task.task, space) + space.sample_many(4, np.random.default_rng(0))
    checked = matching_configs(task.task, space, configs)
    assert {c["parallel"] for c in checked} == {"heads", "blocks"}


def test_probabilities_read_elsewhere_are_left_alone(tmp_path):
    net, args = _inputs("scores_too")
    with torch.no_grad():
        expected = [t.numpy() for t in net(*args)]
    path = tmp_path / "scores_too.onnx"
    torch.onnx.export(net, args, str(path), opset_version=17, dynamo=False)
    model = from_onnx(path)
    target = default_target(2)
    assert not [t for t in extract_tasks(model, target) if t.name.startswith("attention")]
    outputs = build_model(model, target, {}).run(*[a.numpy() for a in args])
    for got, want in zip(outputs, expected):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_a_run_saved_before_the_fusion_is_rebuilt_without_it():
    # its records were tuned on the matmuls and softmax apart
    assert GraphOptions.of({"layout": "nhwc"}).attention is False
    assert GraphOptions().attention is True
