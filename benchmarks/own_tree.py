"""The fusebench of the tree a script stands in, imported ahead of whatever the venv installed:
bench/measure/launch.py's finder over this checkout's own pyproject.toml map (issue 77, item 5).

    import own_tree  # first, before any fusebench import
"""

from __future__ import annotations

import sys
from importlib.util import module_from_spec, spec_from_file_location
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _use_own_tree() -> None:
    spec = spec_from_file_location("fusebench_launch", ROOT / "bench" / "measure" / "launch.py")
    assert spec is not None and spec.loader is not None
    launch = module_from_spec(spec)
    spec.loader.exec_module(launch)
    sys.meta_path.insert(0, launch.TreeFinder(launch.package_dirs(ROOT)))


_use_own_tree()
