"""A model zoo in code: PyTorch definitions with random weights (no downloads needed).

``ZOO`` maps a name to its constructor; ``zoo_model`` builds the model in eval mode with
deterministic random weights and an example input of the requested size.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType

from .bert import BertConfig, BertModel, bert_base
from .densenet import densenet121
from .googlenet import googlenet
from .mobilenet import mobilenet_v1, mobilenet_v2
from .resnet import resnet18, resnet50
from .shufflenet import shufflenet_v2
from .squeezenet import squeezenet1_1
from .vgg import vgg11

ZOO: Mapping[str, Callable] = MappingProxyType({
    "resnet18": resnet18, "resnet50": resnet50, "mobilenet_v1": mobilenet_v1,
    "mobilenet_v2": mobilenet_v2, "squeezenet1_1": squeezenet1_1, "vgg11": vgg11,
    "shufflenet_v2": shufflenet_v2,
    "googlenet": googlenet, "densenet121": densenet121, "bert_base": bert_base})

TEXT_MODELS = frozenset({"bert_base"})


def zoo_model(name: str, batch: int = 1, image_size: int = 224, seq_len: int = 128, seed: int = 0):
    """``(module in eval mode, example_inputs)`` for a zoo model.

    Image models take ``float32[batch, 3, image_size, image_size]``; ``bert_base`` takes token
    ids ``int64[batch, seq_len]`` (see ``tensortune.zoo.bert``). Weights and batch-norm
    statistics are random but fixed by ``seed``; the global torch RNG is left untouched.
    """
    import torch

    if name not in ZOO:
        raise KeyError(f"unknown zoo model {name!r}; known: {', '.join(sorted(ZOO))}")
    for what, value in (("batch", batch), ("image_size", image_size), ("seq_len", seq_len)):
        if not isinstance(value, int) or value <= 0:
            raise ValueError(f"{what} must be a positive integer, got {value!r}")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        module = ZOO[name]()
        _randomize_batch_norm(module)
        if name in TEXT_MODELS:
            limit = module.cfg.max_positions
            if seq_len > limit:
                raise ValueError(f"seq_len {seq_len} exceeds {name}'s {limit} positions")
            inputs = (torch.randint(0, module.cfg.vocab, (batch, seq_len)),)
        else:
            inputs = (torch.randn(batch, 3, image_size, image_size),)
    return module.eval(), inputs


def _randomize_batch_norm(module) -> None:
    """Give batch-norm layers non-trivial statistics, so that folding them into convolutions
    changes the weights as it would for a trained model."""
    import torch

    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.uniform_(-0.1, 0.1)
                m.running_var.uniform_(0.5, 1.5)
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.1, 0.1)


def parameter_count(module) -> int:
    return sum(p.numel() for p in module.parameters())


__all__ = ["ZOO", "zoo_model", "parameter_count", "BertConfig", "BertModel", "resnet18",
           "resnet50", "mobilenet_v1", "mobilenet_v2", "squeezenet1_1", "vgg11", "googlenet",
           "densenet121", "bert_base"]
