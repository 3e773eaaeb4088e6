"""Presets' seeded weights kept between loads (fusebench.models.loading.WeightsCache): the second
load reads what the first wrote, bit for bit; a file that does not fit is made again; weights the
disk has no room for are made and said, not written; `fusebench cache` shows and clears it."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import mlx.core as mx
import pytest
from mlx.utils import tree_flatten

from fusebench.commands import main
from fusebench.models import loading
from fusebench.models.loading import WeightsCache, load_model


def weights(model) -> dict[str, mx.array]:
    return dict(tree_flatten(model.parameters()))


def test_the_second_load_reads_what_the_first_wrote_bit_for_bit(tmp_path: Path):
    first_cache = WeightsCache(tmp_path)
    first = load_model("tiny", weights_cache=first_cache)
    (written,) = tmp_path.glob("*.safetensors")
    assert first_cache.written_s > 0 and not list(tmp_path.glob(".*partial*"))
    again = WeightsCache(tmp_path)
    second = load_model("tiny", weights_cache=again)
    assert again.written_s == 0.0
    seeded = weights(load_model("tiny"))
    for name, value in seeded.items():
        assert mx.array_equal(weights(first)[name], value).item()
        assert mx.array_equal(weights(second)[name], value).item()
    # another seed, layer count or dtype is another file
    load_model("tiny", seed=1, weights_cache=WeightsCache(tmp_path))
    assert len(list(tmp_path.glob("*.safetensors"))) == 2 and written.exists()


def test_a_file_that_does_not_fit_is_made_again(tmp_path: Path, capsys):
    load_model("tiny", weights_cache=WeightsCache(tmp_path))
    (written,) = tmp_path.glob("*.safetensors")
    written.write_bytes(b"not a safetensors file")
    cache = WeightsCache(tmp_path)
    model = load_model("tiny", weights_cache=cache)
    assert "unusable" in capsys.readouterr().err and cache.written_s > 0
    seeded = weights(load_model("tiny"))
    assert all(mx.array_equal(weights(model)[k], v).item() for k, v in seeded.items())


def test_weights_the_disk_has_no_room_for_are_made_and_said_not_written(
    tmp_path: Path, monkeypatch
):
    full = SimpleNamespace(total=10 * 2**30, used=10 * 2**30 - 1024, free=1024)
    monkeypatch.setattr(loading.shutil, "disk_usage", lambda path: full)
    cache = WeightsCache(tmp_path)
    model = load_model("tiny", weights_cache=cache)
    assert not list(tmp_path.glob("*.safetensors")) and cache.written_s == 0.0
    assert cache.not_kept.startswith(f"0.0 GiB free in {tmp_path}, ")
    assert cache.not_kept.endswith(" GiB needed")
    seeded = weights(load_model("tiny"))
    assert all(mx.array_equal(weights(model)[k], v).item() for k, v in seeded.items())


def test_a_write_that_fails_leaves_no_file_and_says_why(tmp_path: Path, monkeypatch, capsys):
    def no_space(path, arrays):
        Path(path).write_bytes(b"half a file")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(loading.mx, "save_safetensors", no_space)
    cache = WeightsCache(tmp_path)
    load_model("tiny", weights_cache=cache)
    assert not list(tmp_path.iterdir()) and cache.written_s == 0.0
    assert "No space left on device" in cache.not_kept
    assert cache.not_kept in capsys.readouterr().err


def test_the_cache_command_shows_and_clears_the_weights(tmp_path: Path, monkeypatch, capsys):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    load_model("tiny", weights_cache=WeightsCache(tmp_path / "fusebench" / "weights"))
    assert main(["cache"]) == 0
    shown = capsys.readouterr().out
    assert "weights │ 1 " in shown and "MiB" in shown
    assert main(["cache", "--clear", "weights"]) == 0
    assert not list((tmp_path / "fusebench").glob("weights/*"))
    with pytest.raises(SystemExit) as bad:
        main(["cache", "--clear", "everything"])
    assert bad.value.code == 2
    assert "choose from 'weights', 'machine', 'plans', 'kernels', 'all'" in capsys.readouterr().err
