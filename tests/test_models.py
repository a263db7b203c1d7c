"""Layer tables of real networks: counted parameters and FLOPs against published values."""

import pytest
from hypothesis import given, settings, strategies as st

from simulator.errors import ConfigError
from simulator.workload import models
from simulator.workload.models import MODELS, Layer, Model, get_model

# Exact trainable-parameter counts of the reference implementations (torchvision; OpenAI's
# released GPT-2 checkpoints).
EXACT_PARAMS = {
    "alexnet": 61_100_840,
    "vgg11": 132_863_336,
    "vgg13": 133_047_848,
    "vgg16": 138_357_544,
    "vgg19": 143_667_240,
    "resnet18": 11_689_512,
    "resnet34": 21_797_672,
    "resnet50": 25_557_032,
    "resnet101": 44_549_160,
    "resnet152": 60_192_808,
    "inception_v3": 23_834_568,
    "gpt2_small": 124_439_808,
    "gpt2_xl": 1_557_611_200,
}

# Published forward cost in GMACs per image (torchvision model tables; Szegedy et al. 2016).
PUBLISHED_GMACS = {
    "alexnet": 0.71,
    "vgg11": 7.61,
    "vgg13": 11.31,
    "vgg16": 15.47,
    "vgg19": 19.63,
    "resnet18": 1.81,
    "resnet34": 3.66,
    "resnet50": 4.09,
    "resnet101": 7.80,
    "resnet152": 11.51,
    "inception_v3": 5.71,
}


def megatron_forward_flops(n_layers, d, seq_len, vocab_out=0):
    """Forward FLOPs of a transformer per sequence, Narayanan et al. 2021 (SC), Section 5.1:
    per layer 24 s h^2 + 4 s^2 h, plus 2 s h V for an output projection onto the vocabulary."""
    return n_layers * (24 * seq_len * d**2 + 4 * seq_len**2 * d) + 2 * seq_len * d * vocab_out


def test_registry_names():
    assert set(MODELS) == {"alexnet", "vgg11", "vgg13", "vgg16", "vgg19", "resnet18",
                           "resnet34", "resnet50", "resnet101", "resnet152",
                           "inception_v3", "bert_base", "bert_large", "gpt2_small", "gpt2_xl",
                           "small_cnn"}
    for name in MODELS:
        model = get_model(name)
        assert isinstance(model, Model) and model.name == name
        assert get_model(name) is model  # built once


@pytest.mark.parametrize("name", sorted(EXACT_PARAMS))
def test_params_equal_reference_count(name):
    model = get_model(name)
    assert model.params == EXACT_PARAMS[name] == model.published_params


def test_inception_aux_head_adds_its_published_parameters():
    assert models.inception_v3(aux_logits=True).params == 27_161_264


@pytest.mark.parametrize("name, d, n_layers", [("bert_base", 768, 12), ("bert_large", 1024, 24)])
def test_bert_params_match_closed_form(name, d, n_layers):
    # embeddings (word + position + token type + norm) + blocks (12 d^2 + 13 d) + pooler
    closed = (30_522 + 512 + 2) * d + 2 * d + n_layers * (12 * d * d + 13 * d) + d * d + d
    assert get_model(name).params == closed


def test_bert_params_near_published_rounded_figures():
    # Devlin et al. 2019 round to 110M / 340M. BERT-base is within 0.5 %; BERT-large's 340M is
    # 1.4 % above the 335,141,888 its released checkpoints hold (a known overstatement).
    base, large = get_model("bert_base"), get_model("bert_large")
    assert base.params == pytest.approx(base.published_params, rel=0.005)
    assert large.params == 335_141_888
    assert large.params == pytest.approx(large.published_params, rel=0.015)


@pytest.mark.parametrize("name", sorted(PUBLISHED_GMACS))
def test_cnn_flops_match_published_macs(name):
    assert get_model(name).forward_flops == pytest.approx(2e9 * PUBLISHED_GMACS[name], rel=0.10)


def test_bert_base_flops_at_128_tokens():
    # ~11.2 GMACs per 128-token sequence, i.e. ~22.4 GFLOPs.
    assert models.bert_base(seq_len=128).forward_flops == pytest.approx(22.4e9, rel=0.10)


@pytest.mark.parametrize("name, d, n_layers, vocab_out", [
    ("bert_base", 768, 12, 0), ("bert_large", 1024, 24, 0),
    ("gpt2_small", 768, 12, 50_257), ("gpt2_xl", 1600, 48, 50_257),
])
def test_transformer_flops_match_megatron_formula(name, d, n_layers, vocab_out):
    model = get_model(name)
    seq_len = 512 if name.startswith("bert") else 1024
    assert model.input_desc == f"sequence of {seq_len} tokens"
    expected = megatron_forward_flops(n_layers, d, seq_len, vocab_out)
    assert model.forward_flops == pytest.approx(expected, rel=0.10)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_layers_are_well_formed(name):
    model = get_model(name)
    for layer in model.layers:
        assert layer.params >= 0 and layer.forward_flops >= 0 and layer.activation_bytes >= 0
    names = [layer.name for layer in model.layers]
    assert len(names) == len(set(names))
    assert model.sample_unit in ("images", "sequences")
    assert model.source


@pytest.mark.parametrize("name", sorted(MODELS))
def test_gradient_bytes_scale_with_precision(name):
    model = get_model(name)
    assert model.gradient_bytes() == 4 * model.params
    assert 2 * model.gradient_bytes(2) == model.gradient_bytes(4)


def test_unknown_model_lists_valid_names():
    with pytest.raises(ConfigError) as info:
        get_model("resnet5")
    message = str(info.value)
    assert "resnet5" in message
    for name in MODELS:
        assert name in message


@pytest.mark.parametrize("builder, max_len", [(models.bert_base, 512), (models.gpt2_small, 1024)])
def test_sequence_length_out_of_range_rejected(builder, max_len):
    for bad in (0, max_len + 1):
        with pytest.raises(ConfigError):
            builder(seq_len=bad)


@pytest.mark.parametrize("builder", [models.bert_base, models.bert_large, models.gpt2_small])
def test_sequence_length_changes_flops_not_params(builder):
    short, long = builder(seq_len=128), builder(seq_len=256)
    assert short.params == long.params
    assert long.forward_flops > 2 * short.forward_flops * 0.99  # linear part doubles, s^2 grows
    assert long.activation_bytes > short.activation_bytes


@settings(max_examples=25, deadline=None)
@given(st.integers(min_value=1, max_value=1023))
def test_gpt2_flops_increase_with_sequence_length(seq_len):
    shorter, longer = models.gpt2_small(seq_len=seq_len), models.gpt2_small(seq_len=seq_len + 1)
    assert shorter.params == longer.params == EXACT_PARAMS["gpt2_small"]
    assert longer.forward_flops > shorter.forward_flops


def test_conv2d_output_size_and_counts():
    layer, h, w = models.conv2d("c", 3, 64, 11, 4, 224, 224, pad=2, bias=True)
    assert (h, w) == (55, 55)
    assert layer.params == 64 * 3 * 121 + 64
    assert layer.forward_flops == 2 * 64 * 55 * 55 * 3 * 121 + 64 * 55 * 55
    assert layer.activation_bytes == 64 * 55 * 55 * 4
    layer, h, w = models.conv2d("c", 8, 8, (1, 7), 1, 17, 17, pad=(0, 3), bias=False)
    assert (h, w) == (17, 17) and layer.params == 8 * 8 * 7


def test_attention_counts_score_and_context_matmuls():
    layer = models.attention("a", 128, 768, 12)
    assert layer.params == 0
    matmuls = 2 * 2 * 128 * 128 * 768
    assert matmuls < layer.forward_flops < 1.1 * matmuls


def test_tied_linear_has_flops_but_no_params():
    layer = models.linear("head", 768, 50_257, bias=False, tokens=4, tied=True)
    assert layer.params == 0 and layer.forward_flops == 2 * 768 * 50_257 * 4


def test_negative_layer_rejected():
    with pytest.raises(ValueError):
        Layer("x", "linear", -1, 0.0, 0)
