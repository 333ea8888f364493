"""The model zoo: published parameter counts, inputs, determinism, small forward passes."""
import pytest
import torch

from tensortune.zoo import ZOO, BertConfig, bert_base, parameter_count, zoo_model

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
}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_parameter_counts_match_the_published_ones(name):
    module = ZOO[name]()
    assert parameter_count(module) == PUBLISHED[name]


def test_bert_encoder_layers_have_the_published_size():
    model = bert_base()
    assert [parameter_count(layer) for layer in model.layers] == [7_087_872] * 12
    assert parameter_count(model.layers) == 85_054_464


def test_zoo_is_a_constant_mapping_and_unknown_names_list_the_known_ones():
    assert set(ZOO) == set(PUBLISHED)
    with pytest.raises(TypeError):
        ZOO["mine"] = lambda: None  # type: ignore[index]
    with pytest.raises(KeyError, match="'resnet19'; known: bert_base, densenet121, googlenet, "
                                       "mobilenet_v1, mobilenet_v2, resnet18, resnet50, "
                                       "shufflenet_v2, squeezenet1_1, vgg11"):
        zoo_model("resnet19")


def test_image_models_take_the_requested_batch_and_size_and_run():
    module, (x,) = zoo_model("resnet18", batch=2, image_size=32)
    assert not module.training
    assert x.shape == (2, 3, 32, 32) and x.dtype == torch.float32
    with torch.no_grad():
        assert module(x).shape == (2, 1000)
    for name in ("squeezenet1_1", "mobilenet_v1", "googlenet", "densenet121", "shufflenet_v2"):
        module, (x,) = zoo_model(name, image_size=64)
        with torch.no_grad():
            assert module(x).shape == (1, 1000)


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
