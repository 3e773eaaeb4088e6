"""`fusebench env`'s table: what a run records about this machine, and the slow-BLAS warning with
its remedy."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from ..core.header import Env, PeakProbe
from ..core.typed import to_mapping


def _format_value(key: str, value: Any) -> str:
    if value is None:
        return "n/a"
    if key == "ram_bytes":
        return f"{value / 2**30:.1f} GiB"
    if key == "git_dirty":
        return "yes (uncommitted changes)" if value else "no"
    if key == "compiles":
        return (
            "yes (mx.compile makes fused kernels)"
            if value
            else "NO: mx.compile fuses nothing here (no C++ compiler found); compiled variants "
            "run their eager code"
        )
    return str(value)


def render_env(env: Env, probe: PeakProbe | None = None) -> Table:
    """Two-column table of an environment record, plus measured peaks if given."""
    table = Table(title="fusebench environment", show_header=False)
    table.add_column("key", style="bold")
    table.add_column("value", overflow="fold")  # fold, not truncate: the BLAS path is the point
    for key, value in to_mapping(env).items():
        table.add_row(key, Text(_format_value(key, value)))  # Text: paths may contain [markup]
    if probe:
        table.add_row(
            "fp32 matmul peak", Text(f"{probe.matmul_gflops} GFLOP/s ({probe.matmul_shape})")
        )
        copy_mib = probe.copy_bytes // 2**20
        table.add_row(
            "memory copy peak", Text(f"{probe.copy_gbps} GB/s ({copy_mib} MiB, read+write)")
        )
    return table


def print_env(
    console: Console,
    env: Env,
    probe: PeakProbe | None = None,
    warning: str | None = None,
    title: str = "warning: slow BLAS",
) -> None:
    """Print the environment table, then the warning (by default the slow-BLAS one) when there is
    one."""
    console.print(render_env(env, probe))
    if warning:
        console.print(Panel(Text(warning), title=title, border_style="yellow"))
