"""The model family: parity with mlx-lm's own gemma4_text, across every op-variant combination."""

from __future__ import annotations

import itertools
import json

import mlx.core as mx
import pytest
from mlx.utils import tree_flatten
from mlx_lm.generate import generate_step, stream_generate
from mlx_lm.utils import load_model as mlx_lm_load_model

from fusebench.models import REGISTRY, ModelConfigError, UnknownOpError, load_model, save_checkpoint
from fusebench.models.config import Overrides, layer_types, preset_config, truncate
from fusebench.models.ops import complete

# fp32 parity: logits are O(1)-O(30) after the softcap; fused and reordered ops differ in the last
# bits only.
ATOL = {"float32": 2e-4, "bfloat16": 0.15}

ALL_COMBINATIONS = [
    dict(zip(REGISTRY, combo, strict=True))
    for combo in itertools.product(*(spec.variants for spec in REGISTRY.values()))
]


@pytest.fixture(scope="module", params=["tiny", "tiny-moe"])
def pair(request, tmp_path_factory):
    """Our model and mlx-lm's gemma4_text, loaded from the same checkpoint directory."""
    ours = load_model(request.param, seed=1)
    path = save_checkpoint(ours, tmp_path_factory.mktemp(request.param))
    theirs, _ = mlx_lm_load_model(path)
    return ours, theirs


def run_logits(model, tokens: mx.array, decode_steps: int) -> list[mx.array]:
    """Prefill, then greedy decode steps feeding a fixed token sequence; every step's logits."""
    cache = model.make_cache()
    out = [model(tokens[:, :-decode_steps], cache=cache)]
    for i in range(decode_steps):
        out.append(model(tokens[:, -decode_steps + i :][:, :1], cache=cache))
    mx.eval(out)
    return out


@pytest.mark.parametrize("ops", ALL_COMBINATIONS, ids=lambda ops: "-".join(ops.values()))
def test_every_combination_matches_mlx_lm(pair, ops):
    ours, theirs = pair
    ours.set_ops(ops)
    # 6 prompt tokens, then 14 decode steps: past the tiny presets' 8-token sliding window.
    tokens = mx.random.randint(0, ours.args.vocab_size, (2, 20), key=mx.random.key(7))
    for a, b in zip(run_logits(ours, tokens, 14), run_logits(theirs, tokens, 14), strict=True):
        assert mx.abs(a - b).max().item() < ATOL["float32"]


def test_long_prefill_past_the_window_matches(pair):
    ours, theirs = pair
    ours.set_ops({"attention": "manual"})
    tokens = mx.random.randint(0, ours.args.vocab_size, (1, 40), key=mx.random.key(3))
    for a, b in zip(run_logits(ours, tokens, 3), run_logits(theirs, tokens, 3), strict=True):
        assert mx.abs(a - b).max().item() < ATOL["float32"]


def greedy_tokens(model, prompt: mx.array, n: int) -> list[int]:
    return [int(token) for token, _logprobs in generate_step(prompt, model, max_tokens=n)]


def test_greedy_decoding_is_identical_for_32_steps(pair):
    ours, theirs = pair
    prompt = mx.random.randint(0, ours.args.vocab_size, (12,), key=mx.random.key(5))
    expected = greedy_tokens(theirs, prompt, 32)
    for ops in ({"geglu": "unfused", "softcap": "unfused", "attention": "manual"}, complete({})):
        ours.set_ops(ops)
        assert greedy_tokens(ours, prompt, 32) == expected


def test_stream_generate_accepts_the_model():
    """mlx-lm's own generation loop drives the model, with a word-level tokenizer built in memory
    (no hub)."""
    from mlx_lm.tokenizer_utils import TokenizerWrapper
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace
    from transformers import PreTrainedTokenizerFast

    words = Tokenizer(WordLevel({f"w{i}": i for i in range(512)}, unk_token="w0"))
    words.pre_tokenizer = Whitespace()
    tokenizer = TokenizerWrapper(PreTrainedTokenizerFast(tokenizer_object=words))
    responses = list(stream_generate(load_model("tiny"), tokenizer, "w1 w2 w3", max_tokens=5))
    assert responses[-1].generation_tokens == 5
    assert responses[-1].prompt_tokens == 3


@pytest.mark.parametrize("mode", ["affine4", "affine8", "nvfp4"])
def test_quantized_checkpoint_round_trip(tmp_path, mode):
    """Quantized as mlx-lm quantizes: the checkpoint loads in mlx-lm and back in fusebench with the
    same logits."""
    source = load_model("tiny-moe", quantize=mode, seed=2)
    path = save_checkpoint(source, tmp_path / mode)
    assert json.loads((path / "config.json").read_text())["quantization"]["mode"] in (
        "affine",
        "nvfp4",
    )
    reloaded = load_model(
        str(path), ops={"geglu": "compiled", "softcap": "compiled", "attention": "sdpa"}
    )
    theirs, _ = mlx_lm_load_model(path)
    tokens = mx.random.randint(0, 512, (1, 16), key=mx.random.key(2))
    for a, b, c in zip(
        run_logits(source, tokens, 4),
        run_logits(reloaded, tokens, 4),
        run_logits(theirs, tokens, 4),
        strict=True,
    ):
        assert mx.abs(a - c).max().item() < ATOL["float32"]
        assert mx.abs(b - c).max().item() < ATOL["float32"]


def test_bfloat16_matches_within_its_tolerance(tmp_path):
    ours = load_model(
        "tiny",
        dtype="bfloat16",
        ops={"geglu": "compiled", "softcap": "compiled", "attention": "sdpa"},
    )
    theirs, _ = mlx_lm_load_model(save_checkpoint(ours, tmp_path / "bf16"))
    tokens = mx.random.randint(0, 512, (1, 12), key=mx.random.key(4))
    for a, b in zip(run_logits(ours, tokens, 4), run_logits(theirs, tokens, 4), strict=True):
        assert mx.abs(a.astype(mx.float32) - b.astype(mx.float32)).max().item() < ATOL["bfloat16"]


def test_seeded_weights_are_bit_identical():
    a, b, c = load_model("tiny", seed=3), load_model("tiny", seed=3), load_model("tiny", seed=4)
    wa, wb, wc = (dict(tree_flatten(m.parameters())) for m in (a, b, c))
    assert all(mx.array_equal(wa[k], wb[k]).item() for k in wa)
    assert not all(mx.array_equal(wa[k], wc[k]).item() for k in wa)


def test_set_ops_switches_without_touching_weights():
    model = load_model("tiny")
    before = dict(tree_flatten(model.parameters()))
    model.set_ops({"geglu": "compiled", "attention": "sdpa"})
    assert model.ops["geglu"] == "compiled" and model.ops["attention"] == "sdpa"
    assert model.ops["softcap"] == REGISTRY["softcap"].default
    after = dict(tree_flatten(model.parameters()))
    assert all(before[k] is after[k] for k in before)


def test_real_presets_have_the_published_shapes():
    e2b = preset_config("e2b", Overrides())
    assert e2b["layer_types"].count("full_attention") == 7 and e2b["num_kv_shared_layers"] == 20
    assert preset_config("31b", Overrides())["layer_types"][5] == "full_attention"


@pytest.mark.parametrize(
    ("preset", "layers"), [("e2b", 1), ("e2b", 2), ("e2b", 4), ("e4b", 7), ("26b", 3), ("31b", 60)]
)
def test_truncation_keeps_shapes_and_a_valid_kv_sharing(preset, layers):
    config = preset_config(preset, Overrides(layers=layers))
    assert config["num_hidden_layers"] == len(config["layer_types"]) == layers
    assert config["layer_types"][-1] == "full_attention"
    first_shared = layers - config["num_kv_shared_layers"]
    own = set(config["layer_types"][:first_shared])
    assert set(config["layer_types"][first_shared:]) <= own
    model = load_model(preset, layers=layers) if preset == "e2b" and layers <= 2 else None
    if model is not None:
        assert model.layers[0].mlp.gate_proj.weight.shape == (6144, 1536)


def test_truncation_rule_matches_the_full_models():
    e2b = preset_config("e2b", Overrides())
    assert truncate(e2b, 35)["layer_types"] == layer_types(35, 5)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"source": "e3b"},
            "unknown preset 'e3b'; choose from 26b, 31b, e2b, e4b, gemma3-1b, llama3.2-1b, "
            "llama3.2-3b, mistral-7b, qwen3-0.6b, qwen3-30b-a3b, qwen3-4b, tiny, tiny-moe",
        ),
        ({"source": "tiny", "layers": 0}, "layers=0 is out of range; choose 1..6"),
        ({"source": "tiny", "layers": 7}, "layers=7 is out of range; choose 1..6"),
        (
            {"source": "tiny", "dtype": "float8"},
            "unknown dtype 'float8'; choose from float32, bfloat16, float16",
        ),
        (
            {"source": "tiny", "quantize": "int3"},
            "unknown quantize mode 'int3'; choose from affine4",
        ),
    ],
)
def test_bad_overrides_name_the_choices(kwargs, message):
    with pytest.raises(ModelConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_model(kwargs.pop("source"), **kwargs)


def test_unknown_op_or_variant_names_the_choices():
    with pytest.raises(UnknownOpError, match="unknown op 'gelu'; choose from geglu, softcap"):
        load_model("tiny", ops={"gelu": "compiled"})
    with pytest.raises(
        UnknownOpError, match="unknown geglu variant 'fused'; choose from unfused, compiled"
    ):
        load_model("tiny", ops={"geglu": "fused"})


def test_bad_checkpoint_directories(tmp_path):
    with pytest.raises(ModelConfigError, match="no such checkpoint directory"):
        load_model(str(tmp_path / "missing"))
    with pytest.raises(ModelConfigError, match=r"config\.json: missing"):
        load_model(str(tmp_path))
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(ModelConfigError, match=r"config.json:1: malformed JSON"):
        load_model(str(tmp_path))
    (tmp_path / "config.json").write_text('{"model_type": "no_such_arch"}')
    with pytest.raises(
        ModelConfigError,
        match=r"model_type: 'no_such_arch' is not an architecture mlx-lm \S+ can load",
    ):
        load_model(str(tmp_path))
    (tmp_path / "config.json").write_text('{"hidden_size": 8}')
    with pytest.raises(ModelConfigError, match="model_type: missing"):
        load_model(str(tmp_path))
    (tmp_path / "config.json").write_text('{"model_type": "gemma4_text"}')
    with pytest.raises(ModelConfigError, match=r"no model\*\.safetensors"):
        load_model(str(tmp_path))


def test_checkpoint_with_mismatched_weights_is_an_input_error(tmp_path):
    path = save_checkpoint(load_model("tiny"), tmp_path / "ckpt")
    config = json.loads((path / "config.json").read_text())
    config["hidden_size"] = 32
    (path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelConfigError, match=r"weights do not match config\.json"):
        load_model(str(path))


def test_multimodal_gemma4_checkpoint_loads_its_text_decoder(tmp_path):
    text = load_model("tiny", seed=5)
    path = save_checkpoint(text, tmp_path / "mm")
    weights = mx.load(str(path / "model.safetensors"))
    mx.save_safetensors(
        str(path / "model.safetensors"),
        {f"model.language_model.{k.removeprefix('model.')}": v for k, v in weights.items()}
        | {"model.vision_tower.dummy": mx.zeros((2,))},
    )
    config = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(
        json.dumps({"model_type": "gemma4", "text_config": config, "vocab_size": 512})
    )
    loaded = load_model(str(path))
    tokens = mx.array([[1, 2, 3, 4]])
    assert mx.abs(loaded(tokens) - text(tokens)).max().item() == 0
