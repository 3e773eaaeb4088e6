"""How often analysis.changepoints flags a series with no change, and how soon it finds a real step:
simulated at the noise of this project's runs, the figures docs/history.md quotes.

Each series is one figure per commit in log space with its own standard error (drawn from 0.8-2.5%,
the range of the A/B Δ intervals in results/gate-ab-4, or from a quiet machine's 0.3-1%), plus a
between-run spread τ, plus two spikes: two runs 8% off the level, as a busy machine gives, with an
interval either 3x wider (the run saw its own noise) or no wider (the worst case: the run did not
know). A false alarm is any step flagged in a series without one; power is the share of series with
a 3% step (at 7 of 12, or in the middle) whose step is flagged within one commit of where it is,
with no other.

    python benchmarks/changepoint_calibration.py [--series 2000] [--seed 0]
"""

from __future__ import annotations

import argparse

import numpy as np
import own_tree  # noqa: F401  (this script's own tree: benchmarks/own_tree.py)

from fusebench.analysis.changepoints import PENALTY, find_steps

SPIKE = np.log(0.92)


# The standard errors of one run's point: the slow VM's A/B Δ intervals (±1.6-4.9%,
# results/gate-ab-4) and a quiet machine's (±0.6-2%).
SE_RANGES = {"slow VM": (0.008, 0.025), "quiet": (0.003, 0.010)}


def series(rng, n, tau_scale, step_at, spike_width, se_range):
    se = rng.uniform(*se_range, n)
    tau = tau_scale * np.median(se)
    y = rng.normal(0.0, np.sqrt(se**2 + tau**2))
    if step_at is not None:
        y[step_at:] += np.log(0.97)
    spikes = rng.choice([i for i in range(n) if step_at is None or abs(i - step_at) > 1], 2, False)
    y[spikes] += SPIKE
    se[spikes] *= spike_width
    return y, se


def rates(rng, count, n, tau_scale, step_at, spike_width, penalty, se_range):
    false, found = 0, 0
    for _ in range(count):
        y, se = series(rng, n, tau_scale, step_at, spike_width, se_range)
        steps = find_steps(y, se, penalty).steps
        if step_at is None:
            false += bool(steps)
        else:
            found += len(steps) == 1 and abs(steps[0].index - step_at) <= 1
    return (false if step_at is None else found) / count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--series", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--penalty", type=float, default=PENALTY, help="try another penalty")
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    print(f"penalty {args.penalty}, {args.series} series a line, seed {args.seed}\n")
    print("| run noise | commits | τ / se | spike interval | false alarms | 3% step found |")
    print("|---|---|---|---|---|---|")
    for noise, se_range in SE_RANGES.items():
        for n in (12, 30, 60):
            for tau_scale in (0.0, 1.0):
                for width in (3.0, 1.0):
                    at = 6 if n == 12 else n // 2
                    figures = [
                        rates(rng, args.series, n, tau_scale, step, width, args.penalty, se_range)
                        for step in (None, at)
                    ]
                    print(
                        f"| {noise} | {n} | {tau_scale:g} | {width:g}x | {figures[0]:.1%} "
                        f"| {figures[1]:.1%} |"
                    )


if __name__ == "__main__":
    main()
