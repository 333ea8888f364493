"""The model zoo: published parameter counts, inputs, determinism, small forward passes, and
the wider zoo's exports (torch.export, ONNX) at small sizes."""
import io

import numpy as np
import pytest
import torch

from tensortune.zoo import (IMAGE_SIZES, WIDER_ZOO, ZOO, BertConfig, GPT2Config, bert_base,
                            default_image_size, gpt2_small, parameter_count, zoo_model)
from tensortune.zoo import _randomize_batch_norm, _randomize_layer_scales
from tensortune.zoo.convnext import convnext_tiny
from tensortune.zoo.resnet import Bottleneck, ResNet
from tensortune.zoo.vit import deit_small

PUBLISHED = {
    "resnet18": 11_689_512,
    "resnet50": 25_557_032,
    "mobilenet_v1": 4_231_976,  # Keras MobileNet (alpha 1.0, 224): its trainable parameters
    "mobilenet_v2": 3_504_872,
    "squeezenet1_1": 1_235_496,
    "shufflenet_v2": 2_278_604,  # torchvision's shufflenet_v2_x1_0
    "vgg11": 132_863_336,
    # torchvision's googlenet without auxiliary heads (6,624,904) has 3x3 convolutions where the
    # paper's third branch has 5x5: 16 more weights for each of that branch's 23,808 channel pairs
    "googlenet": 6_624_904 + 16 * 23_808,
    "densenet121": 7_978_856,  # torchvision's densenet121
    "bert_base": 109_482_240,  # embeddings 23,837,184 + 12 layers + pooler 590,592
    # the wider zoo: torchvision's counts, timm's for DeiT-S, Hugging Face's for GPT-2
    # (its head is tied to the token embedding), Ultralytics' for YOLOv5s
    "efficientnet_b0": 5_288_548,
    "mobilenet_v3_large": 5_483_032,
    "regnet_y_400mf": 4_344_144,
    "resnext50_32x4d": 25_028_904,
    "convnext_tiny": 28_589_128,
    "deit_small": 22_050_664,
    "gpt2_small": 124_439_808,
    "yolo_v5s": 7_235_389,
    "unet": 7_763_074,  # base width 32 (no published count: the paper's 64 has 31,037,698)
}
OUTPUTS = {"bert_base": [(1, 8, 768), (1, 768)], "gpt2_small": [(1, 50257)],
           "yolo_v5s": [(1, 3 * (64 + 16 + 4), 85)], "unet": [(1, 2, 64, 64)]}


def _state(module) -> dict:
    return {k: v.clone() for k, v in module.state_dict().items()}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_every_model_has_its_size_deterministic_weights_and_runs(name):
    module, inputs = zoo_model(name, image_size=64, seq_len=8)
    # DeiT built for 64x64 has 16 patch positions where the published 224x224 one has 196
    fewer = (196 - 16) * 384 if name == "deit_small" else 0
    assert parameter_count(module) == PUBLISHED[name] - fewer
    again, inputs_again = zoo_model(name, image_size=64, seq_len=8)
    first, second = _state(module), _state(again)
    assert first.keys() == second.keys()
    assert all(torch.equal(first[k], second[k]) for k in first)
    assert all(torch.equal(a, b) for a, b in zip(inputs, inputs_again))
    with torch.no_grad():
        out = module(*inputs)
    outs = out if isinstance(out, tuple) else (out,)
    assert [tuple(o.shape) for o in outs] == OUTPUTS.get(name, [(1, 1000)])
    assert all(torch.isfinite(o).all() for o in outs)


def test_bert_encoder_layers_have_the_published_size():
    model = bert_base()
    assert [parameter_count(layer) for layer in model.layers] == [7_087_872] * 12
    assert parameter_count(model.layers) == 85_054_464


def test_zoo_is_a_constant_mapping_and_unknown_names_list_the_known_ones():
    assert set(ZOO) == set(PUBLISHED)
    assert set(WIDER_ZOO) <= set(ZOO) and len(WIDER_ZOO) >= 8
    with pytest.raises(TypeError):
        ZOO["mine"] = lambda: None  # type: ignore[index]
    with pytest.raises(KeyError, match="'resnet19'; known: bert_base, convnext_tiny, deit_small, "
                                       "densenet121, efficientnet_b0, googlenet, gpt2_small, "
                                       "mobilenet_v1, mobilenet_v2, mobilenet_v3_large, "
                                       "regnet_y_400mf, resnet18, resnet50, resnext50_32x4d, "
                                       "shufflenet_v2, squeezenet1_1, unet, vgg11, yolo_v5s"):
        zoo_model("resnet19")


def test_image_sizes_default_per_family():
    assert default_image_size("resnet18") == 224 and dict(IMAGE_SIZES) == {"yolo_v5s": 640,
                                                                           "unet": 256}
    _, (x,) = zoo_model("unet")
    assert x.shape == (1, 3, 256, 256)
    # ViT's positions follow the image size it is built for
    module, (x,) = zoo_model("deit_small", image_size=32)
    assert module.pos_embed.shape == (1, 5, 384)
    with pytest.raises(ValueError, match="positions for 4"):
        module(torch.randn(1, 3, 64, 64))


def test_image_models_take_the_requested_batch_and_size_and_run():
    module, (x,) = zoo_model("resnet18", batch=2, image_size=32)
    assert not module.training
    assert x.shape == (2, 3, 32, 32) and x.dtype == torch.float32
    with torch.no_grad():
        assert module(x).shape == (2, 1000)


def test_weights_are_deterministic_and_the_global_rng_is_untouched():
    state = torch.get_rng_state()
    a, (xa,) = zoo_model("mobilenet_v2", image_size=32)
    b, (xb,) = zoo_model("mobilenet_v2", image_size=32)
    c, _ = zoo_model("mobilenet_v2", image_size=32, seed=1)
    assert torch.equal(torch.get_rng_state(), state)
    assert torch.equal(xa, xb)
    pa, pb, pc = (next(m.parameters()) for m in (a, b, c))
    assert torch.equal(pa, pb) and not torch.equal(pa, pc)
    # batch-norm statistics are randomized, so folding them is not a no-op
    bn = next(m for m in a.modules() if isinstance(m, torch.nn.BatchNorm2d))
    assert not torch.allclose(bn.running_var, torch.ones_like(bn.running_var))


def test_bert_takes_token_ids_and_returns_sequence_and_pooled_outputs():
    module, (ids,) = zoo_model("bert_base", batch=2, seq_len=16)
    assert ids.shape == (2, 16) and ids.dtype == torch.int64
    assert int(ids.max()) < BertConfig().vocab
    tiny = bert_base(BertConfig(vocab=100, hidden=32, layers=2, heads=4, intermediate=64,
                                max_positions=16)).eval()
    with torch.no_grad():
        seq, pooled = tiny(torch.randint(0, 100, (2, 8)))
    assert seq.shape == (2, 8, 32) and pooled.shape == (2, 32)
    with pytest.raises(ValueError, match="seq_len 600 exceeds"):
        zoo_model("bert_base", seq_len=600)
    with pytest.raises(ValueError, match="not a multiple"):
        BertConfig(hidden=30, heads=4)


def test_gpt2_is_causal_and_takes_token_ids():
    tiny = gpt2_small(GPT2Config(vocab=100, hidden=32, layers=2, heads=4, max_positions=16))
    ids = torch.randint(0, 100, (1, 8))
    with torch.no_grad():
        logits = tiny.eval()(ids)
        changed = ids.clone()
        changed[0, -1] = (ids[0, -1] + 1) % 100
        # the last position sees every token: changing it changes the logits ...
        assert not torch.allclose(tiny(changed), logits)
        # ... and no position sees a later one: the first 4 tokens alone give the logits of
        # position 3 the full sequence would (read from a model cut at that position)
        assert torch.allclose(tiny(ids[:, :4]), _logits_at(tiny, ids, 3), atol=1e-5)
    assert logits.shape == (1, 100)
    with pytest.raises(ValueError, match="seq_len 2000 exceeds"):
        zoo_model("gpt2_small", seq_len=2000)


def _logits_at(model, ids, position):
    x = model.word(ids) + model.position(model.position_ids[:, :ids.shape[1]])
    for layer in model.layers:
        x = layer(x)
    return model.lm_head(model.norm(x[:, position]))


# the wider zoo at small sizes for the export checks: fewer layers where the full depth only
# repeats the same blocks (constructor arguments, used here only)
SMALL = {"convnext_tiny": lambda: convnext_tiny(depths=(1, 1, 1, 1)),
         "resnext50_32x4d": lambda: ResNet(Bottleneck, (1, 1, 1, 1), groups=32, group_width=4),
         "deit_small": lambda: deit_small(image_size=32, depth=2),
         "gpt2_small": lambda: gpt2_small(GPT2Config(vocab=100, hidden=64, layers=2, heads=4,
                                                     max_positions=16))}


def _small(name):
    if name not in SMALL:
        return zoo_model(name, image_size=32 if name != "yolo_v5s" else 64)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        module = SMALL[name]().eval()
        _randomize_batch_norm(module)
        _randomize_layer_scales(module)  # else ConvNeXt's blocks add almost nothing
    if name == "gpt2_small":
        return module, (torch.randint(0, 100, (1, 8)),)
    return module, (torch.randn(1, 3, 32, 32),)


@pytest.mark.parametrize("name", WIDER_ZOO)
def test_wider_zoo_exports_to_onnx_and_onnx_runtime_agrees(name):
    import onnx
    import onnxruntime as ort

    from tensortune.frontend import unsupported_ops

    module, inputs = _small(name)
    with torch.no_grad():
        expected = module(*inputs)
        torch.export.export(module, inputs)  # what Session.from_torch does first
        buffer = io.BytesIO()
        torch.onnx.export(module, inputs, buffer, dynamo=False, opset_version=17)
    model = onnx.load_from_string(buffer.getvalue())
    assert unsupported_ops(model) == []  # every operator has a converter in TVM's frontend
    session = ort.InferenceSession(buffer.getvalue(), providers=["CPUExecutionProvider"])
    got = session.run(None, {i.name: t.numpy() for i, t in zip(session.get_inputs(), inputs)})
    np.testing.assert_allclose(got[0], expected.numpy(), rtol=1e-3, atol=1e-4)
