from dataclasses import replace

import pytest
import yaml

from fusebench.core.cell import PeakPercents, Rates
from fusebench.core.header import Env, Peak, PeakProbe
from fusebench.core.typed import from_mapping, to_mapping
from fusebench.measure.machine.roofline import (
    CHIPS_FILE,
    achieved,
    attended_pairs,
    cell_work,
    load_chips,
    match_chip,
    peak_for,
    percent_of_peak,
)
from fusebench.models.config import Overrides, preset_config

# The tiny preset by hand: hidden 64, 4 query heads, 2 KV heads, head_dim 32 (sliding) / 64 (full),
# MLP 128 (256 in the 3 KV-shared layers), PLE width 16, vocab 512, tied embeddings. Layers:
# sliding, sliding, full (own KV), then sliding, sliding, full (sharing it).
HIDDEN, VOCAB, PLE, LAYERS = 64, 512, 16, 6


def _attention(head_dim: int, owns_kv: bool) -> int:
    q_and_o = 2 * HIDDEN * 4 * head_dim
    k_and_v = 2 * HIDDEN * 2 * head_dim if owns_kv else 0
    norms = head_dim * (2 if owns_kv else 1)  # q_norm, k_norm (v_norm has no weight)
    return q_and_o + k_and_v + norms


def _layer(head_dim: int, owns_kv: bool, mlp_width: int) -> int:
    mlp = 3 * HIDDEN * mlp_width
    layer_norms = 4 * HIDDEN
    ple = HIDDEN * PLE + PLE * HIDDEN + HIDDEN  # gate, projection, norm
    layer_scalar = 1
    return _attention(head_dim, owns_kv) + mlp + layer_norms + ple + layer_scalar


TINY_LAYERS = (
    2 * _layer(32, True, 128)
    + _layer(64, True, 128)
    + 2 * _layer(32, False, 256)
    + _layer(64, False, 256)
)
TINY_HEAD = VOCAB * HIDDEN  # the tied embedding, used as the LM head
TINY_PLE_TABLE = VOCAB * LAYERS * PLE  # looked up only
# per_layer_model_projection, its norm, the final norm
TINY_OTHER = HIDDEN * LAYERS * PLE + PLE + HIDDEN
TINY_TOTAL = TINY_LAYERS + TINY_HEAD + TINY_PLE_TABLE + TINY_OTHER
TINY_ACTIVE = TINY_TOTAL - TINY_PLE_TABLE


@pytest.fixture(scope="module")
def tiny():
    return preset_config("tiny", Overrides())


def test_parameter_counts_match_the_hand_count(tiny):
    work = cell_work(tiny, 16, 4, 2)
    assert work.params_total == TINY_TOTAL == 487_766
    assert work.params_active == TINY_ACTIVE
    assert work.params_head == TINY_HEAD
    assert work.params_lookup == TINY_PLE_TABLE


def test_prefill_flops_match_the_hand_count(tiny):
    prompt, batch = 16, 2
    work = cell_work(tiny, prompt, 4, batch)
    # The LM head runs on each sequence's last position only; every other weight on every token.
    matmul = 2 * (TINY_ACTIVE - TINY_HEAD) * batch * prompt + 2 * TINY_HEAD * batch
    # Sliding window 8: queries 0..7 see 1..8 keys, the other 8 see 8 each; full layers see 1..16.
    sliding_pairs, full_pairs = sum(range(1, 9)) + 8 * 8, sum(range(1, 17))
    attention = batch * (4 * (4 * 4 * 32 * sliding_pairs) + 2 * (4 * 4 * 64 * full_pairs))
    assert work.prefill_matmul_flops == matmul
    assert work.prefill_attention_flops == attention
    assert work.prefill_flops == matmul + attention


def test_gen_bytes_match_the_hand_count(tiny):
    prompt, gen_tokens, batch = 16, 4, 2
    work = cell_work(tiny, prompt, gen_tokens, batch)
    steps = gen_tokens - 1
    sliding_kv, full_kv = 2 * 2 * 32 * 4, 2 * 2 * 64 * 4  # K and V, 2 heads, fp32, per token
    weights = TINY_ACTIVE * 4
    written = batch * steps * (2 * sliding_kv + full_kv)  # only the 3 layers that own a cache write
    # Step j attends to prompt + j keys: the window caps the 4 sliding layers at 8; the 2 full ones
    # see them all.
    read = batch * (
        4 * sliding_kv * 8 * steps + 2 * full_kv * sum(prompt + j for j in range(1, steps + 1))
    )
    assert work.gen_steps == steps
    assert work.gen_weight_bytes_per_step == weights
    assert work.gen_kv_write_bytes == written
    assert work.gen_kv_read_bytes == read
    assert work.gen_bytes == steps * weights + read + written
    assert work.gen_bytes_per_token == pytest.approx(work.gen_bytes / (batch * steps))


def test_moe_counts_the_routed_share_of_the_experts():
    config = preset_config("tiny-moe", Overrides())
    work = cell_work(config, 8, 2, 1)
    experts = 6 * 3 * 8 * 32 * 64  # 6 layers of gate, up and down projections of 8 experts
    assert work.params_experts == experts
    assert work.params_active == work.params_total - experts * 6 // 8  # top 2 of 8
    one_seq = cell_work(config, 8, 2, 1).gen_weight_bytes_per_step
    many_seqs = cell_work(config, 8, 2, 8).gen_weight_bytes_per_step
    assert many_seqs - one_seq == experts * 4 * 6 // 8  # 8 sequences may route to all 8 experts


def test_bf16_halves_the_weight_bytes(tiny):
    assert cell_work(tiny, 8, 2, 1, dtype="bfloat16").gen_weight_bytes_per_step == TINY_ACTIVE * 2


def test_prefill_only_cell_moves_no_gen_bytes(tiny):
    work = cell_work(tiny, 8, 1, 1)
    assert work.gen_bytes == 0 and work.gen_bytes_per_token is None
    assert achieved(0.5, None, work, 0).gen_gbps is None


@pytest.mark.parametrize(
    ("length", "window", "pairs"), [(4, None, 10), (4, 8, 10), (10, 3, 6 + 7 * 3), (1, 1, 1)]
)
def test_attended_pairs(length, window, pairs):
    assert attended_pairs(length, window) == pairs


def _peak(**figures: float | None) -> Peak:
    return Peak(name="a test peak", source="this test", **figures)


def test_achieved_and_percent_of_peak(tiny):
    work = replace(cell_work(tiny, 8, 32, 1), prefill_flops=2e12, gen_bytes=30e9, gen_steps=31)
    # a trial of fewer decode steps (a warm-up's) reads its own steps' bytes
    one_step = achieved(4.0, 3.0, work, 1).gen_gbps
    assert one_step == pytest.approx(work.gen_bytes / work.gen_steps / 3.0 / 1e9)
    rates = achieved(4.0, 3.0, work, work.gen_steps)
    assert rates == Rates(prefill_tflops=pytest.approx(0.5), gen_gbps=pytest.approx(10.0))
    peak = _peak(fp32_tflops=1.0, bf16_tflops=2.0, memory_gbps=40.0)
    expected = PeakPercents(pytest.approx(50.0), pytest.approx(25.0), ())
    assert percent_of_peak(rates, peak) == expected
    assert percent_of_peak(rates, peak, "bfloat16").prefill_pct_of_peak == pytest.approx(25.0)
    assert percent_of_peak(rates, None) == PeakPercents(None, None, ())


def test_a_rate_above_the_peak_is_flagged_never_a_percentage_over_100():
    low_peak = _peak(fp32_tflops=0.5, bf16_tflops=None, memory_gbps=10.0)
    of_peak = percent_of_peak(Rates(prefill_tflops=1.0, gen_gbps=5.0), low_peak)
    assert of_peak == PeakPercents(None, pytest.approx(50.0), ("prefill",))


PROBE = PeakProbe(
    matmul_gflops=250.0,
    matmul_shape="2048x2048 @ 2048x2048 fp32",
    copy_gbps=12.5,
    copy_bytes=256 * 2**20,
)


def test_peak_for_prefers_the_probe():
    peak = peak_for(Env(backend="metal", device="Apple M2 Max"), PROBE)
    assert peak.fp32_tflops == pytest.approx(0.25)
    assert peak.memory_gbps == 12.5
    assert peak.confidence == "measured"


@pytest.mark.parametrize(
    ("backend", "device", "chip"),
    [
        ("metal", "Apple M2 Max", "Apple M2 Max"),
        ("metal", "Apple M2", "Apple M2"),
        ("metal", "Apple M1 Ultra", "Apple M1 Ultra"),
        ("metal", "Apple M4 Pro", "Apple M4 Pro"),
        ("cuda", "NVIDIA A100-SXM4-80GB", "NVIDIA A100 80GB"),
        ("cuda", "NVIDIA A100-PCIE-40GB", "NVIDIA A100 40GB"),
        ("cuda", "NVIDIA H100 80GB HBM3", "NVIDIA H100 SXM"),
        ("cuda", "NVIDIA H100 PCIe", "NVIDIA H100 PCIe"),
        ("cuda", "NVIDIA H200", "NVIDIA H200"),
        ("cuda", "NVIDIA L4", "NVIDIA L4"),
        ("cuda", "NVIDIA GeForce RTX 4090", "NVIDIA GeForce RTX 4090"),
    ],
)
def test_peak_for_matches_known_chips(backend, device, chip):
    assert peak_for(Env(backend=backend, device=device)).name == chip


@pytest.mark.parametrize(
    ("backend", "device"),
    [
        ("cpu", "Apple M2 Max"),
        ("cpu", "AMD EPYC 9R14"),
        ("cuda", "NVIDIA L40S"),
        ("cuda", "NVIDIA H100 NVL"),
    ],
)
def test_peak_for_unknown_device_is_none(backend, device):
    assert peak_for(Env(backend=backend, device=device)) is None


def test_chips_table_is_complete_and_sourced():
    chips = load_chips()
    assert len({c.name for c in chips}) == len(chips)
    for chip in chips:
        assert chip.source.startswith("https://")
        assert chip.fp32_tflops > 0 and chip.bf16_tflops > 0 and chip.memory_gbps > 0
        assert (chip.confidence or "published") in {"published", "approximate"}
        assert chip.confidence != "approximate" or chip.note, chip.name
        # every entry is reachable by its own name
        assert match_chip(chip.name).name == chip.name


def test_a_peak_is_recorded_as_chips_yaml_lists_it():
    listed = yaml.safe_load(CHIPS_FILE.read_text())["chips"]
    # what a header records of a known chip is its chips.yaml entry, and reads back as the chip
    recorded = [to_mapping(chip) for chip in load_chips()]
    assert [{k: v for k, v in r.items() if v is not None} for r in recorded] == listed
    assert [from_mapping(Peak, r) for r in recorded] == list(load_chips())
    measured = to_mapping(peak_for(Env(backend="cpu"), PROBE))
    assert measured["confidence"] == "measured" and measured["fp32_tflops"] > 0
