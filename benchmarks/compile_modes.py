"""One chain, four ways: why `fusebench fusions` and the op registry's `compiled` variants can read
the same fusion differently on a CPU.

The GeGLU chain at E2B's prefill shape, built as `fusebench fusions` rebuilds it (from MLX's trace
of the registry's `geglu: unfused`), timed in one process, interleaved, each sample `--calls`
calls each evaluated alone: eager; `mx.compile` as it compiles by default; `mx.compile(...,
shapeless=True)` (how the registry's variant, ollama PR 15587 and mlx-lm compile such helpers); and
the registry's own `unfused` and `compiled` variants. The kernels each makes are read from its
graph.

    .venv/bin/python benchmarks/compile_modes.py [--rounds 15] [--out FILE.md]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import mlx.core as mx

ROOT = Path(__file__).resolve().parent.parent
import own_tree  # noqa: E402, F401  (this script's own tree: benchmarks/own_tree.py)

from fusebench.analysis.fusions import fusible_groups  # noqa: E402
from fusebench.measure.fusions.probe import fusible  # noqa: E402
from fusebench.measure.fusions.replay import chain_function  # noqa: E402
from fusebench.measure.fusions.trace import compiled_nodes, trace  # noqa: E402
from fusebench.measure.machine.env import collect_env  # noqa: E402
from fusebench.models.ops import geglu_compiled, geglu_unfused  # noqa: E402

SHAPE = (1, 127, 6144)  # E2B's MLP in a 128-token prompt's first chunk


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--calls", type=int, default=5)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    gate, up = mx.random.normal(SHAPE, key=mx.random.key(0)), mx.random.normal(SHAPE)
    mx.eval(gate, up)
    call = trace("geglu", lambda g, u: [geglu_unfused(g, u)], [gate, up])
    (group,) = fusible_groups(call.graph, fusible(call.graph.primitives))
    names = [t.name for t in group.inputs]
    rebuilt = chain_function(group.primitives, names, [t.name for t in group.outputs])
    values = [call.sources[name] for name in names]
    arms = {
        "rebuilt chain, eager": lambda: rebuilt(*values)[0],
        "rebuilt chain, mx.compile": (lambda f: lambda: f(*values)[0])(mx.compile(rebuilt)),
        "rebuilt chain, mx.compile(shapeless=True)": (lambda f: lambda: f(*values)[0])(
            mx.compile(rebuilt, shapeless=True)
        ),
        "registry geglu: unfused": lambda: geglu_unfused(gate, up),
        "registry geglu: compiled": lambda: geglu_compiled(gate, up),
    }
    made = {name: compiled_nodes([arm()]) for name, arm in arms.items()}
    reference = arms["rebuilt chain, eager"]()
    errors = {name: mx.abs(arm() - reference).max().item() for name, arm in arms.items()}
    seconds: dict[str, list[float]] = {name: [] for name in arms}
    for round_index in range(args.rounds):
        order = list(arms) if round_index % 2 == 0 else list(arms)[::-1]
        for name in order:
            start = time.perf_counter()
            for _ in range(args.calls):
                mx.eval(arms[name]())
            seconds[name].append((time.perf_counter() - start) / args.calls)
    env = collect_env()
    lines = [
        f"Machine: {env.cpu}, {env.backend}, BLAS {env.blas_family}, mlx {env.mlx}; "
        f"shape {list(SHAPE)}, {args.rounds} rounds of {args.calls} calls, interleaved.",
        "",
        "| arm | median per call | kernels mx.compile made | max abs err vs eager |",
        "|---|---:|---|---:|",
    ]
    for name in arms:
        median = statistics.median(seconds[name]) * 1e3
        shown = ", ".join(made[name]) or "none"
        lines.append(f"| {name} | {median:.2f} ms | {shown} | {errors[name]:.2g} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
