"""The correctness check rides on the warm-up: a check trial keeps the logits it computes anyway,
and the worker compares each variant's with the reference variant's on the same prompt, with no
pass of their own."""

from __future__ import annotations

import mlx.core as mx
import pytest

from fusebench.measure.worker import make_prompt, time_trial, warmup_agreement
from fusebench.models.loading import load_model

PROMPT, GEN = 12, 3
BASELINE = {"geglu": "unfused", "softcap": "unfused", "attention": "manual"}
FUSED = {"geglu": "compiled", "softcap": "compiled", "attention": "sdpa"}


@pytest.fixture(scope="module")
def tiny():
    return load_model("tiny")


def check_trial(model, ops: dict[str, str]) -> list[mx.array]:
    model.set_ops(ops)
    prompt = make_prompt(model.args.vocab_size, 1, PROMPT, 0, 100_000)
    timing = time_trial(model, prompt, GEN, 2048, keep_logits=True)
    assert timing.logits is not None
    return timing.logits


def test_a_check_trial_keeps_the_prefill_and_every_decode_steps_logits(tiny):
    logits = check_trial(tiny, BASELINE)
    assert len(logits) == GEN
    assert all(a.shape == (1, tiny.args.vocab_size) for a in logits)


def test_a_fused_variant_agrees_with_the_reference_on_the_warm_up_logits(tiny):
    reference = check_trial(tiny, BASELINE)
    found = warmup_agreement("fused", "baseline", reference, check_trial(tiny, FUSED), 1e-2, 2)
    assert found.passed and found.tokens_checked == 2 and found.tokens_agree == 2
    assert 0.0 <= found.max_abs_err <= 1e-2


def test_logits_off_by_more_than_the_tolerance_fail(tiny):
    reference = check_trial(tiny, BASELINE)
    off = [a + 0.5 for a in reference]
    found = warmup_agreement("broken", "baseline", reference, off, 1e-2, 3)
    assert not found.passed and found.max_abs_err == pytest.approx(0.5, rel=1e-3)


def test_a_decisive_different_token_fails_and_ends_the_comparison_there():
    vocab = 8
    ref = [mx.eye(vocab)[i : i + 1] * 5.0 for i in (1, 2, 3)]  # tokens 1, 2, 3, each by 5 logits
    new = [ref[0], mx.eye(vocab)[4:5] * 5.0, ref[2]]  # step 2 chooses token 4: other inputs after
    found = warmup_agreement("v", "ref", ref, new, 1e-2, 3)
    assert not found.passed
    assert found.tokens_checked == 2 and found.tokens_agree == 1


def test_a_near_tie_that_goes_the_other_way_stops_the_comparison_without_failing():
    vocab = 8
    tie = mx.zeros((1, vocab)).at[0, 1].add(1e-3).at[0, 2].add(0.0)
    other = mx.zeros((1, vocab)).at[0, 2].add(1e-3)  # picks token 2 by a hair
    ref = [tie, mx.eye(vocab)[3:4], mx.eye(vocab)[4:5]]
    new = [other, mx.eye(vocab)[5:6] * 9.0, mx.eye(vocab)[6:7]]  # later steps: other inputs
    found = warmup_agreement("v", "ref", ref, new, 1e-2, 3)
    assert found.passed and found.tokens_checked == 1 and found.tokens_agree == 1


def test_a_trial_records_what_the_machine_did_beside_it(tiny):
    from fusebench.measure.worker import machine_seconds, time_trial

    prompt = make_prompt(tiny.args.vocab_size, 1, PROMPT, 0, 0)
    record = time_trial(tiny, prompt, GEN, 2048).measured
    if machine_seconds() is None:  # not Linux: nothing to read
        assert record.steal_s is None and record.others_cpu_s is None
    else:
        assert record.steal_s >= 0.0 and record.others_cpu_s >= 0.0
