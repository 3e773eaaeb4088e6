import dataclasses
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import fusebench
from rich.console import Console

import fusebench.measure.machine.env as env_mod
from fusebench.core.header import Env, PeakProbe
from fusebench.core.typed import from_mapping, to_mapping
from fusebench.measure.machine.env import (
    BlasChoiceError,
    blas_kind,
    blas_preload_env,
    blas_warning,
    collect_env,
    find_optimized_blas,
    loaded_blas,
)
from fusebench.measure.machine.peaks import probe_peaks
from fusebench.present.env import print_env

REPO_ROOT = Path(__file__).resolve().parent.parent
OPENBLAS = "/usr/lib/x86_64-linux-gnu/openblas-pthread/libblas.so.3"
REFERENCE = "/site-packages/mlx_cpu.libs/libblas-bd8a282c.so.3.10.0"
linux_only = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="LD_PRELOAD is Linux-only"
)
needs_optimized_blas = pytest.mark.skipif(
    find_optimized_blas() is None,
    reason="no optimized BLAS installed (apt-get install libopenblas0-pthread)",
)


def test_collect_env_fills_every_field_and_serializes():
    env = collect_env()
    written = to_mapping(env)
    assert list(written) == [f.name for f in dataclasses.fields(Env)]
    assert from_mapping(Env, json.loads(json.dumps(written))) == env
    assert env.cores >= 1 and "?" not in (env.python, env.backend, env.os)


@pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="this machine class runs mlx on CPU"
)
def test_backend_is_cpu_here():
    assert collect_env().backend == "cpu"


def test_loaded_blas_returns_a_label():
    label = loaded_blas()
    assert blas_kind(label) in {"openblas", "mkl", "reference", "accelerate", "unknown"}
    assert "(" in label


@pytest.mark.parametrize(
    ("label", "kind"),
    [
        (f"openblas ({OPENBLAS})", "openblas"),
        ("mkl (/venv/lib/libmkl_rt.so.2)", "mkl"),
        (f"reference ({REFERENCE})", "reference"),
        ("accelerate (Accelerate.framework)", "accelerate"),
        ("blis (/usr/lib/libblis.so.4)", "unknown"),
        ("unknown (no BLAS library mapped)", "unknown"),
        ("/usr/lib/x86_64-linux-gnu/blas/libblas.so.3", "reference"),
        (OPENBLAS, "openblas"),
        ("", "unknown"),
    ],
)
def test_blas_kind(label, kind):
    assert blas_kind(label) == kind


def test_blas_kind_is_gpu_on_gpu_backends():
    assert blas_kind(f"reference ({REFERENCE})", backend="metal") == "gpu"
    assert blas_kind(f"reference ({REFERENCE})", backend="cuda") == "gpu"


def test_reference_strips_blas_and_keeps_other_preloads():
    base = {"LD_PRELOAD": f"/opt/libjemalloc.so.2:{OPENBLAS} /venv/lib/libmkl_rt.so.2", "FOO": "1"}
    env, desc = blas_preload_env("reference", base)
    assert env["LD_PRELOAD"] == "/opt/libjemalloc.so.2"
    assert env["FOO"] == "1"
    assert "reference" in desc
    assert base["LD_PRELOAD"].startswith("/opt")  # input not mutated


def test_reference_drops_ld_preload_when_only_blas():
    env, _ = blas_preload_env("reference", {"LD_PRELOAD": OPENBLAS})
    assert "LD_PRELOAD" not in env


def test_missing_path_raises_with_path_and_choices():
    with pytest.raises(BlasChoiceError) as info:
        blas_preload_env("/nope/libblas.so.3", {})
    message = str(info.value)
    assert "/nope/libblas.so.3" in message
    assert "auto, reference, or a path to a BLAS .so" in message
    assert "\n" not in message
    assert isinstance(info.value, ValueError)


def test_explicit_path_is_prepended(tmp_path):
    lib = tmp_path / "libopenblas.so.0"
    lib.write_bytes(b"")
    env, desc = blas_preload_env(str(lib), {"LD_PRELOAD": "/opt/libjemalloc.so.2"})
    assert env["LD_PRELOAD"] == f"{lib}:/opt/libjemalloc.so.2"
    assert desc.startswith("openblas")


@linux_only
@needs_optimized_blas
def test_auto_preloads_the_optimized_blas():
    env, desc = blas_preload_env("auto", {"LD_PRELOAD": "/opt/libjemalloc.so.2"})
    assert env["LD_PRELOAD"] == f"{find_optimized_blas()}:/opt/libjemalloc.so.2"
    assert "preloaded" in desc


def test_auto_keeps_a_blas_the_user_preloaded():
    env, desc = blas_preload_env("auto", {"LD_PRELOAD": "/venv/lib/libmkl_rt.so.2"})
    assert env["LD_PRELOAD"] == "/venv/lib/libmkl_rt.so.2"
    assert "already" in desc


def _loaded_blas_in_worker(choice: str) -> str:
    env, _ = blas_preload_env(choice)
    env["PYTHONPATH"] = str(REPO_ROOT)
    code = "import fusebench.measure.machine.env as e; print(e.loaded_blas())"
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@linux_only
@needs_optimized_blas
def test_worker_with_auto_uses_the_optimized_blas():
    out = _loaded_blas_in_worker("auto")
    assert "openblas" in out or "mkl" in out


@linux_only
def test_worker_with_reference_uses_the_reference_blas():
    assert "reference" in _loaded_blas_in_worker("reference")


def test_warning_only_for_cpu_with_reference_blas():
    warning = blas_warning(Env(backend="cpu", blas=f"reference ({REFERENCE})"))
    assert warning is not None
    assert "libopenblas0-pthread" in warning
    assert "pip install scipy-openblas32" in warning  # the fast BLAS without root
    assert blas_warning(Env(backend="cpu", blas=f"openblas ({OPENBLAS})")) is None
    assert blas_warning(Env(backend="metal", blas=f"reference ({REFERENCE})")) is None
    assert blas_warning(Env()) is None


def test_print_env_shows_table_and_warning():
    out = io.StringIO()
    env = dataclasses.replace(collect_env(), backend="cpu", blas=f"reference ({REFERENCE})")
    probe = PeakProbe(
        matmul_gflops=3.5, matmul_shape="512x512 @ 512x512 fp32", copy_gbps=4.0, copy_bytes=2**28
    )
    print_env(Console(file=out, width=200), env, probe, blas_warning(env))
    text = out.getvalue()
    assert "git_commit" in text
    assert "GFLOP/s" in text
    assert "libopenblas0-pthread" in text


def test_probe_peaks_is_quick_and_positive():
    peaks = probe_peaks(seconds=0.3)
    assert peaks.matmul_gflops > 0 and peaks.copy_gbps > 0 and peaks.gemv_read_gbps > 0
    assert from_mapping(PeakProbe, json.loads(json.dumps(to_mapping(peaks)))) == peaks


def test_a_source_checkout_records_its_commit():
    head = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True
    )
    if head.returncode != 0:
        pytest.skip("not a git checkout")
    assert collect_env().git_commit == head.stdout.strip()


# --- threads: auto, measured (measure.machine.threads) -------------------------------------------


def test_every_core_wins_only_when_its_gain_is_surely_above_one():
    import numpy as np

    from fusebench.measure.machine.threads import BOUND, Setting, decide, gain_lower_bound

    rng = np.random.default_rng(3)

    def measured(threads: int, samples) -> Setting:
        logs = np.log(samples)
        return Setting(threads, float(np.mean(samples)), float(np.std(logs, ddof=1)), samples)

    def setting(threads: int, mean_s: float, sd: float) -> Setting:
        return measured(threads, tuple(mean_s * np.exp(sd * rng.standard_normal(30))))

    one = setting(1, 0.10, 0.01)
    # twice as fast but three times as noisy: 0.2x the precision per second
    assert decide((one, setting(2, 0.05, 0.03))).threads == 1
    # twice as fast and as quiet: 2x, surely
    quiet = decide((one, setting(2, 0.05, 0.01)))
    assert quiet.threads == 2 and f"{100 * (1 - BOUND):.0f}% confidence" in quiet.reason
    # one stalled sample of 30 counts: the plain SD sees it, as a run's intervals will
    calm = setting(2, 0.05, 0.01).samples
    stalled = measured(2, (*calm[:-1], 0.05 * 1.35))
    assert stalled.log_sd > 0.05 and decide((one, stalled)).threads == 1
    # a gain of 1.18x on 30 samples a setting is not sure enough
    bound = gain_lower_bound(one, setting(2, 0.085, 0.01))
    assert bound is not None and bound < 1.0


def test_a_cached_choice_without_samples_keeps_the_margin_rule():
    from fusebench.measure.machine.threads import MARGIN, Setting, decide

    one = Setting(1, mean_s=0.10, log_sd=0.01)
    assert decide((one, Setting(2, mean_s=0.055, log_sd=0.01))).threads == 2
    assert decide((one, Setting(2, mean_s=0.10 / (MARGIN * 0.99), log_sd=0.01))).threads == 1


def test_a_thread_choice_reads_back_as_it_was_written():
    from fusebench.core.header import Setting, ThreadChoice

    choice = ThreadChoice(1, (Setting(1, 0.1, 0.01), Setting(2, 0.05, 0.03)), "why")
    assert from_mapping(ThreadChoice, json.loads(json.dumps(to_mapping(choice)))) == choice


def test_two_machines_of_one_cpu_name_keep_their_own_cache(monkeypatch, tmp_path):
    from fusebench.measure.machine import env as env_module

    info = tmp_path / "cpuinfo"
    keys = []
    for flags in ("fpu avx2", "fpu avx2 avx512f"):
        info.write_text(f"model name\t: AMD EPYC\nflags\t\t: {flags}\n")
        monkeypatch.setattr(
            env_module, "Path", lambda p, _info=info: _info if p == "/proc/cpuinfo" else Path(p)
        )
        keys.append(env_module.machine_key(Env(backend="cpu", device="AMD EPYC", cpu="AMD EPYC")))
    assert keys[0] != keys[1] and all(k.startswith("cpu-") for k in keys)


def test_a_cpu_is_named_with_its_family_model_and_widest_vector_extension():
    from fusebench.core.fingerprint import fingerprint
    from fusebench.measure.machine.env import cpuinfo_name

    zen4 = (
        "processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: 17\n"
        "model name\t: AMD EPYC\nflags\t\t: fpu avx2 avx512f\n\n"
        "processor\t: 1\ncpu family\t: 25\nmodel\t\t: 17\nmodel name\t: AMD EPYC\n"
    )
    zen3 = zen4.replace("model\t\t: 17", "model\t\t: 1").replace(" avx512f", "")
    assert cpuinfo_name(zen4) == "AMD EPYC (family 25, model 17, AVX-512)"
    assert cpuinfo_name(zen3) == "AMD EPYC (family 25, model 1, AVX2)"
    # the same bare name, two machines: their throughput is never pooled
    assert len({fingerprint(Env(backend="cpu", cpu=cpuinfo_name(i))) for i in (zen4, zen3)}) == 2
    # where cpuinfo gives a name alone (or none, as on many ARM kernels), that is what is recorded
    assert cpuinfo_name("model name\t: Some CPU\n") == "Some CPU"
    assert cpuinfo_name("processor\t: 0\nBogoMIPS\t: 50.00\n") is None


# --- mx.compile on a shared machine ---------------------------------------------------------------


def test_the_cli_gives_mx_compile_a_folder_this_user_owns(tmp_path):
    # A temp folder in which MLX's compile folder cannot exist (`mlx` is a file), whoever runs the
    # test: before, every new kernel failed to compile there, as it does for a plain user in a temp
    # folder root used first.
    blocked = tmp_path / "tmp"
    blocked.mkdir()
    (blocked / "mlx").write_text("not a folder")
    env = {**os.environ, "TMPDIR": str(blocked), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    done = fusebench("verify", cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert list((tmp_path / "cache" / "fusebench" / "tmp" / "mlx").glob("*/cpu/*"))


def test_a_compile_failure_reads_as_one_line_naming_the_cause():
    from fusebench.measure.machine.env import compile_failure

    lines = [
        "cc1plus: fatal error: /tmp/mlx/0.32.4/cpu/tmp_ab12.cpp: No such file or directory",
        "RuntimeError: [Compile::eval_cpu] Failed to compile function Tanh with error code 256.",
    ]
    message = compile_failure(lines)
    assert message and "\n" not in message
    assert "No such file or directory" in message and "writable by this user" in message
    assert compile_failure(["RuntimeError: something else"]) is None


def test_a_dangling_or_unloadable_blas_is_passed_over(tmp_path, monkeypatch):
    """A removed package can leave /usr/lib/<arch>/libopenblas.so.0 pointing nowhere; preloading it
    would run the reference BLAS under the name of the one meant. The next candidate that loads
    is taken."""
    import mlx.core

    dangling = tmp_path / "libopenblas.so.0"
    dangling.symlink_to(tmp_path / "gone.so")
    not_a_library = tmp_path / "libopenblasp.so.0"
    not_a_library.write_text("not an ELF file")
    loads = mlx.core.__file__  # a shared object this process has loaded already
    monkeypatch.setattr(
        env_mod, "_blas_search_patterns", lambda: [str(dangling), str(not_a_library), loads]
    )
    assert find_optimized_blas() == loads


def test_a_runs_budget_leaves_out_the_thread_choice_but_not_the_environment_probes(monkeypatch):
    """The budget leaves out only what a machine measures once (cached): the environment probes
    every run makes count; each second is on one phase of the run's time."""
    import fusebench.measure.machine.probe as probe_mod
    import fusebench.measure.run.ledger as ledger_mod
    from fusebench.core.header import ThreadChoice
    from fusebench.measure.run.ledger import ONE_TIME, RunTime

    class Clock:  # a stand-in for the run time's clock: set times, nothing timed
        now = 0.0

        def monotonic(self) -> float:
            return self.now

    clock = Clock()

    def advance(seconds: float) -> None:
        clock.now += seconds

    monkeypatch.setattr(ledger_mod, "time", clock)
    env = collect_env()
    monkeypatch.setattr(probe_mod, "probe_env", lambda _: advance(1.0) or env)
    chosen = ThreadChoice(1, reason="measured")
    monkeypatch.setattr(probe_mod, "choose_threads", lambda *_, **__: advance(30.0) or chosen)
    run_time = RunTime(0.0, budget_s=100.0)
    run_time.divide_among(4)
    with run_time.phase("probes"):
        _, _, threads = probe_mod.worker_environment("auto", measuring=run_time.phase(ONE_TIME))
    assert threads == chosen
    assert run_time.seconds == {ONE_TIME: 30.0, "probes": 2.0}  # the two probes' 2 s count
    assert clock.now == 32.0 and run_time.time_left_s() == 98.0
    assert run_time.cell_allowance_s() == 98.0 / 4  # an even part of what is left
    run_time.cell_finished()
    advance(60.0)  # the first cell passed time on
    assert run_time.cell_allowance_s() == pytest.approx(38.0 / 3)
    advance(100.0)
    assert run_time.cell_allowance_s() == 0.0
