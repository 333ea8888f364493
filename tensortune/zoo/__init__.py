"""A model zoo in code: PyTorch definitions with random weights (no downloads needed).

``ZOO`` maps a name to its constructor; ``zoo_model`` builds the model in eval mode with
deterministic random weights and an example input of the requested size (each image model has
a default size, ``IMAGE_SIZES``: 224 unless its family is run at another).
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType

from .bert import BertConfig, BertModel, bert_base
from .convnext import convnext_tiny
from .densenet import densenet121
from .efficientnet import efficientnet_b0
from .googlenet import googlenet
from .gpt2 import GPT2Config, GPT2Model, gpt2_small
from .mobilenet import mobilenet_v1, mobilenet_v2
from .mobilenet_v3 import mobilenet_v3_large
from .regnet import regnet_y_400mf
from .resnet import resnet18, resnet50, resnext50_32x4d
from .shufflenet import shufflenet_v2
from .squeezenet import squeezenet1_1
from .unet import unet
from .vgg import vgg11
from .vit import deit_small
from .yolo import yolo_v5s

ZOO: Mapping[str, Callable] = MappingProxyType({
    "resnet18": resnet18, "resnet50": resnet50, "mobilenet_v1": mobilenet_v1,
    "mobilenet_v2": mobilenet_v2, "squeezenet1_1": squeezenet1_1, "vgg11": vgg11,
    "shufflenet_v2": shufflenet_v2,
    "googlenet": googlenet, "densenet121": densenet121, "bert_base": bert_base,
    # the wider zoo: families users deploy today
    "efficientnet_b0": efficientnet_b0, "mobilenet_v3_large": mobilenet_v3_large,
    "regnet_y_400mf": regnet_y_400mf, "resnext50_32x4d": resnext50_32x4d,
    "convnext_tiny": convnext_tiny, "deit_small": deit_small, "gpt2_small": gpt2_small,
    "yolo_v5s": yolo_v5s, "unet": unet})

TEXT_MODELS = frozenset({"bert_base", "gpt2_small"})
WIDER_ZOO = ("efficientnet_b0", "mobilenet_v3_large", "regnet_y_400mf", "resnext50_32x4d",
             "convnext_tiny", "deit_small", "gpt2_small", "yolo_v5s", "unet")
# the input size each family is usually run at (YOLOv5's --img 640; U-Net on 256x256 tiles)
IMAGE_SIZES: Mapping[str, int] = MappingProxyType({"yolo_v5s": 640, "unet": 256})
# constructors whose weights depend on the image size (ViT's one position per patch)
_SIZED = frozenset({"deit_small"})


def default_image_size(name: str) -> int:
    return IMAGE_SIZES.get(name, 224)


def zoo_model(name: str, batch: int = 1, image_size: int | None = None, seq_len: int = 128,
              seed: int = 0):
    """``(module in eval mode, example_inputs)`` for a zoo model.

    Image models take ``float32[batch, 3, image_size, image_size]`` (``image_size`` None: the
    model's ``default_image_size``); ``bert_base`` and ``gpt2_small`` take token ids
    ``int64[batch, seq_len]`` (see ``tensortune.zoo.bert``). Weights, batch-norm statistics
    and layer scales are random but fixed by ``seed``; the global torch RNG is left untouched.
    """
    import torch

    if name not in ZOO:
        raise KeyError(f"unknown zoo model {name!r}; known: {', '.join(sorted(ZOO))}")
    if image_size is None:
        image_size = default_image_size(name)
    for what, value in (("batch", batch), ("image_size", image_size), ("seq_len", seq_len)):
        if not isinstance(value, int) or value <= 0:
            raise ValueError(f"{what} must be a positive integer, got {value!r}")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        module = ZOO[name](image_size=image_size) if name in _SIZED else ZOO[name]()
        _randomize_batch_norm(module)
        _randomize_layer_scales(module)
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


def _randomize_layer_scales(module) -> None:
    """Layer scales start at 1e-6 (ConvNeXt), which would make every residual branch vanish
    and the output check blind to them; trained ones are around 0.1 to 1."""
    import torch

    with torch.no_grad():
        for name, p in module.named_parameters():
            if name.endswith("layer_scale"):
                p.uniform_(0.1, 0.5)


def parameter_count(module) -> int:
    return sum(p.numel() for p in module.parameters())


__all__ = ["ZOO", "WIDER_ZOO", "IMAGE_SIZES", "zoo_model", "default_image_size",
           "parameter_count", "BertConfig", "BertModel", "GPT2Config", "GPT2Model", "resnet18",
           "resnet50", "mobilenet_v1", "mobilenet_v2", "squeezenet1_1", "vgg11", "googlenet",
           "densenet121", "bert_base", "efficientnet_b0", "mobilenet_v3_large", "regnet_y_400mf",
           "resnext50_32x4d", "convnext_tiny", "deit_small", "gpt2_small", "yolo_v5s", "unet"]
