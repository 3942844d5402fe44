"""The figures ``./dev bench capacity`` prints: per DWS model and accelerator, each policy's
cost against on-demand, its deadline misses, attempts and switches; then issue 23's
acceptance lines, computed from those figures (printed, never asserted)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.table import Table

from benchmarks.capacity.model import Result
from benchmarks.capacity.multiregion import MULTI, SINGLE, Comparison
from shared.domain.capacity.model import Prices

#: Issue 23's target: AUTO's mean cost across the DWS models on A100, against on-demand.
TARGET = 0.55
HEADLINE = "NVIDIA_TESLA_A100"
ON_DEMAND = "on-demand"
AUTO = "AUTO"
UP = "Uniform Progress"

#: results[dws model][accelerator][policy]: one Result per job, in the population's order.
Results = Mapping[str, Mapping[str, Mapping[str, Sequence[Result]]]]


@dataclass(frozen=True)
class Summary:
    share: float  # total cost / total cost of on-demand on the same jobs
    misses: int
    misses_od_meets: int  # misses of jobs that on-demand finishes in time
    attempts: float  # mean per job
    switches: float
    preemptions: float

    @classmethod
    def of(cls, rows: Sequence[Result], on_demand: Sequence[Result], prices: Prices) -> Summary:
        n = len(rows)
        base = sum(r.cost(prices) for r in on_demand)
        return cls(
            share=sum(r.cost(prices) for r in rows) / base,
            misses=sum(r.missed for r in rows),
            misses_od_meets=sum(
                r.missed and not o.missed for r, o in zip(rows, on_demand, strict=True)
            ),
            attempts=sum(r.attempts for r in rows) / n,
            switches=sum(r.switches for r in rows) / n,
            preemptions=sum(r.preemptions for r in rows) / n,
        )


def lower_bound(prices: Prices) -> float:
    """The cheapest any policy could be against on-demand: every job's one run (work and a
    restart) at the cheapest price there is, never preempted, never waiting in vain."""
    return min(prices.spot, prices.flex_start) / prices.standard


def summaries(
    results: Results, prices: Mapping[str, Prices]
) -> dict[tuple[str, str, str], Summary]:
    out = {}
    for model, by_acc in results.items():
        for acc, by_policy in by_acc.items():
            od = by_policy[ON_DEMAND]
            for policy, rows in by_policy.items():
                out[model, acc, policy] = Summary.of(rows, od, prices[acc])
    return out


def console() -> Console:
    # Wide enough for the tables whatever the terminal (or a pipe) says.
    return Console(width=max(Console().width, 120))


def print_models(out: Console, results: Results, prices: Mapping[str, Prices]) -> None:
    """One table per DWS model on the headline accelerator."""
    s = summaries(results, prices)
    for model, by_acc in results.items():
        table = Table(title=f"{HEADLINE}, DWS {model}")
        for column in (
            "policy",
            "vs on-demand",
            "misses",
            "misses OD meets",
            "attempts",
            "switches",
            "preemptions",
        ):
            table.add_column(column, justify="left" if column == "policy" else "right")
        for policy in by_acc[HEADLINE]:
            row = s[model, HEADLINE, policy]
            table.add_row(
                policy,
                f"{row.share:.1%}",
                str(row.misses),
                str(row.misses_od_meets),
                f"{row.attempts:.1f}",
                f"{row.switches:.1f}",
                f"{row.preemptions:.1f}",
            )
        out.print(table)


#: The deadline bands of the by-deadline table (deadline / work).
BANDS = ((1.05, 1.3), (1.3, 2.0), (2.0, 3.0), (3.0, 4.0))


def print_deadlines(out: Console, results: Results, prices: Mapping[str, Prices]) -> None:
    """On the headline accelerator: each policy's cost by deadline band, per DWS model."""
    table = Table(title=f"{HEADLINE}: cost vs on-demand (misses) by deadline / work")
    table.add_column("DWS model")
    table.add_column("policy")
    for lo, hi in BANDS:
        table.add_column(f"{lo:g}-{hi:g}x", justify="right")
    for model, by_acc in results.items():
        by_policy = by_acc[HEADLINE]
        od = by_policy[ON_DEMAND]
        for policy, rows in by_policy.items():
            if policy == ON_DEMAND:
                continue
            cells = []
            for lo, hi in BANDS:
                picked = [
                    i for i, r in enumerate(rows) if lo <= r.job.factor < hi or hi == r.job.factor
                ]
                s = Summary.of([rows[i] for i in picked], [od[i] for i in picked], prices[HEADLINE])
                cells.append(f"{s.share:.0%} ({s.misses})")
            table.add_row(model, policy, *cells)
    out.print(table)


def print_accelerators(out: Console, results: Results, prices: Mapping[str, Prices]) -> None:
    """Per accelerator: AUTO against Uniform Progress in every model, the mean, the bound."""
    s = summaries(results, prices)
    models = list(results)
    table = Table(title="AUTO / Uniform Progress vs on-demand (AUTO misses on-demand meets)")
    table.add_column("accelerator")
    for model in models:
        table.add_column(model, justify="right")
    for column in ("AUTO mean", "bound"):
        table.add_column(column, justify="right")
    for acc in prices:
        cells = [
            f"{s[m, acc, AUTO].share:.1%} / {s[m, acc, UP].share:.1%} "
            f"({s[m, acc, AUTO].misses_od_meets})"
            for m in models
        ]
        mean = sum(s[m, acc, AUTO].share for m in models) / len(models)
        table.add_row(acc, *cells, f"{mean:.1%}", f"{lower_bound(prices[acc]):.1%}")
    out.print(table)


def acceptance(results: Results, prices: Mapping[str, Prices]) -> list[tuple[str, bool, str]]:
    """Issue 23's acceptance: (statement, holds, the measured figures)."""
    s = summaries(results, prices)
    models, accs = list(results), list(prices)
    misses = {(m, a): s[m, a, AUTO].misses_od_meets for m in models for a in accs}
    worst = max(misses, key=lambda k: misses[k])
    margins = {(m, a): s[m, a, AUTO].share - s[m, a, UP].share for m in models for a in accs}
    closest = max(margins, key=lambda k: margins[k])
    mean = sum(s[m, HEADLINE, AUTO].share for m in models) / len(models)
    bound = lower_bound(prices[HEADLINE])
    lines = [
        (
            "AUTO misses no deadline that on-demand meets (every DWS model, every accelerator)",
            sum(misses.values()) == 0,
            f"{sum(misses.values())} such misses in {len(misses)} model x accelerator runs"
            + (f" (most: {misses[worst]} in {worst[0]}, {worst[1]})" if misses[worst] else ""),
        ),
        (
            "AUTO costs no more than Uniform Progress (every DWS model, every accelerator)",
            margins[closest] <= 0,
            f"closest: {closest[1]}, {closest[0]}: AUTO {s[closest[0], closest[1], AUTO].share:.1%}"
            f" vs UP {s[closest[0], closest[1], UP].share:.1%} ({margins[closest]:+.1%})",
        ),
        (
            f"AUTO's mean across the DWS models on A100 <= {TARGET:.0%} of on-demand",
            mean <= TARGET,
            " + ".join(f"{s[m, HEADLINE, AUTO].share:.1%}" for m in models)
            + f" -> {mean:.1%} (bound {bound:.1%})",
        ),
    ]
    for acc in accs:
        if lower_bound(prices[acc]) > TARGET:
            lines.append(
                (
                    f"{acc}: {TARGET:.0%} is out of reach at these prices",
                    True,
                    f"all at the cheapest price, never preempted: {lower_bound(prices[acc]):.1%}",
                )
            )
    return lines


def print_acceptance(out: Console, results: Results, prices: Mapping[str, Prices]) -> None:
    for statement, holds, figures in acceptance(results, prices):
        mark = "[green]PASS[/green]" if holds else "[red]FAIL[/red]"
        out.print(f"{mark} {statement}: {figures}")


def plot(results: Results, prices: Mapping[str, Prices], output: Path) -> Path:
    """Cost against deadline misses on the headline accelerator, one point per policy and
    DWS model, as a PNG under ``output``."""
    import matplotlib

    matplotlib.use("Agg")  # no display: write the file only
    import matplotlib.pyplot as plt

    s = summaries(results, prices)
    figure, axes = plt.subplots(figsize=(7.5, 4.8))
    for marker, model in zip("os^", results, strict=False):
        for policy in results[model][HEADLINE]:
            row = s[model, HEADLINE, policy]
            n = len(results[model][HEADLINE][policy])
            axes.scatter([100 * row.misses / n], [100 * row.share], marker=marker, s=50)
            axes.annotate(
                f"{policy} ({model})",
                (100 * row.misses / n, 100 * row.share),
                xytext=(5, 3),
                textcoords="offset points",
                fontsize=7,
            )
    axes.set_xlabel("deadline misses (% of jobs)")
    axes.set_ylabel("cost (% of on-demand)")
    axes.set_title(f"Cost against deadline misses ({HEADLINE}, Can't Be Late traces)")
    axes.axhline(100 * TARGET, color="grey", linewidth=0.8, linestyle="--")
    axes.grid(True, alpha=0.3)
    output.mkdir(parents=True, exist_ok=True)
    path = output / "capacity.png"
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return path


def print_regions(out: Console, comparisons: Sequence[Comparison], accelerator: str) -> None:
    """The multi-region replay: every policy per DWS model, then the saving."""
    if not comparisons:
        return
    policies = list(comparisons[0].shares)
    table = Table(
        title=f"Multi-region ({comparisons[0].jobs} jobs, 2-3 regions of one cloud each), "
        f"{accelerator}: cost vs on-demand (misses)"
    )
    table.add_column("policy")
    for c in comparisons:
        table.add_column(c.model, justify="right")
    for policy in policies:
        table.add_row(
            policy, *(f"{c.shares[policy]:.1%} ({c.misses[policy]})" for c in comparisons)
        )
    out.print(table)
    for c in comparisons:
        extra = c.misses[MULTI] - c.misses[SINGLE]
        holds = c.shares[MULTI] < c.shares[SINGLE] and extra <= 0
        mark = "[green]PASS[/green]" if holds else "[red]FAIL[/red]"
        out.print(
            f"{mark} DWS {c.model}: multi-region AUTO {c.shares[MULTI]:.1%} vs single-region "
            f"{c.shares[SINGLE]:.1%}: {c.saving:.1%} cheaper ({c.factor:.2f}x; SkyNomad reports "
            f"1.25-3.96x), {extra:+d} misses; {c.moves:.2f} moves and ${c.egress_usd:.2f} of "
            "checkpoint egress per job"
        )
