"""Where a run's numbers go: a JSONL file, a console table, trackers, and plots at the end."""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path
from typing import Any, Iterable, Optional

from rich.console import Console
from rich.table import Table

from .metric_rows import eval_rows, moving_average, train_rows


def peak_memory_bytes() -> tuple[str, int]:
    """("cuda", peak allocated) on a GPU, else ("rss", the process's peak resident set)."""
    try:
        import torch

        if torch.cuda.is_available():
            return "cuda", int(torch.cuda.max_memory_allocated())
    except ImportError:
        pass
    import resource

    return "rss", int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


METRICS_FILE = "metrics.jsonl"


def read_metrics(run_dir: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The rows of ``RUN_DIR/metrics.jsonl`` (none if the file is absent); a bad line names
    the file and line."""
    path = Path(run_dir) / METRICS_FILE
    if not path.exists():
        return []
    rows = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}, line {n}: not JSON ({exc.msg}); was the run interrupted mid-write?") from None
    return rows


class MetricsLog:
    """The one writer (and, through ``read_metrics``, reader) of ``metrics.jsonl``: one JSON
    object per step, a compact console line, trackers, and samples.jsonl beside it."""

    SHOWN = ("step", "reward_mean", "pass_rate", "zero_signal_frac", "completion_len_mean", "kl", "loss",
             "grad_norm", "tokens_generated", "tokens_per_s", "time_step_s", "memory_peak_gb")

    def __init__(self, run_dir: str | os.PathLike[str], console: Optional[Console] = None,
                 trackers: Any = None, keep_rows: Optional[list[dict[str, Any]]] = None) -> None:
        self.dir = Path(run_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.path = self.dir / METRICS_FILE
        self.rows: list[dict[str, Any]] = list(keep_rows or [])
        # A resumed run keeps the rows up to its checkpoint; a new run starts an empty file.
        self.path.write_text("".join(json.dumps(r) + "\n" for r in self.rows))
        self.console = console or Console()
        self.trackers = trackers          # an accelerate.Accelerator with trackers initialised, or None

    def truncate_after(self, step: int) -> None:
        """A resumed run: keep the rows up to its checkpoint, in memory and on disk."""
        self.rows = [r for r in self.rows if r.get("step", 0) <= step]
        self.path.write_text("".join(json.dumps(r) + "\n" for r in self.rows))

    def log(self, row: dict[str, Any]) -> None:
        row = {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in row.items()}
        self.rows.append(row)
        with self.path.open("a") as f:
            f.write(json.dumps(row) + "\n")
        if self.trackers is not None:
            self.trackers.log({k: v for k, v in row.items() if isinstance(v, (int, float))}, step=row["step"])

    def print_step(self) -> None:
        """One line per step: the numbers to watch while a run goes."""
        r = self.rows[-1]
        parts = [f"[bold]step {r['step']}[/bold]"]
        for key, label in (("reward_mean", "reward"), ("pass_rate", "pass"), ("zero_signal_frac", "zero-signal"),
                           ("completion_len_mean", "len"), ("kl", "kl"), ("loss", "loss"), ("grad_norm", "|g|"),
                           ("tokens_per_s", "tok/s"), ("time_step_s", "s"), ("memory_peak_gb", "GB")):
            if r.get(key) is not None:
                parts.append(f"{label} {_fmt(r[key])}")
        self.console.print("  ".join(parts), highlight=False)

    def print_summary(self) -> None:
        """First and last tenth of the run, averaged (single steps are too noisy to compare);
        then the first and last evaluation, when there were any."""
        rows = train_rows(self.rows)
        n = max(1, len(rows) // 10)
        table = Table(title=f"run summary ({len(rows)} steps): {self.dir}")
        table.add_column("metric")
        table.add_column(f"first {n} steps", justify="right")
        table.add_column(f"last {n} steps", justify="right")
        for key in self.SHOWN[1:]:
            if any(r.get(key) is not None for r in rows):
                table.add_row(key, _fmt(mean_of([r.get(key) for r in rows[:n]])),
                              _fmt(mean_of([r.get(key) for r in rows[-n:]])))
        self.console.print(table)
        evals = eval_rows(self.rows)
        if evals:
            self.console.print(eval_table(evals[0], evals[-1]))
        from .ledger_view import ledger_table   # it draws on this module

        ledger = ledger_table(self.rows)
        if ledger is not None:
            self.console.print(ledger)

    def samples(self, rows: Iterable[dict[str, Any]]) -> None:
        with (self.dir / "samples.jsonl").open("a") as f:
            for row in rows:
                f.write(json.dumps(row) + "\n")


def eval_table(first: dict[str, Any], last: dict[str, Any]) -> Table:
    """The held-out figures of two evaluations side by side, with the change."""
    table = Table(title=f"held-out eval ({int(first.get('eval_prompts') or 0)} prompts): step {first['step']} "
                        f"→ step {last['step']}")
    table.add_column("metric")
    table.add_column(f"step {first['step']}", justify="right")
    table.add_column(f"step {last['step']}", justify="right")
    table.add_column("change", justify="right")
    keys = [k for k in first if k.startswith("eval_") and k not in ("eval_prompts", "eval_infra", "eval_time_s")]
    overall = lambda k: k == "eval_greedy_pass_rate" or k.startswith("eval_pass@")  # noqa: E731
    for key in sorted(keys, key=lambda k: (not overall(k), k)):   # the overall figures first
        a, b = first.get(key), last.get(key)
        change = f"{b - a:+.3f}" if isinstance(a, (int, float)) and isinstance(b, (int, float)) else "-"
        table.add_row(key, _fmt(a), _fmt(b), change)
    return table


def mean_of(values: Iterable[Any]) -> Optional[float]:
    """The mean of the finite numbers among ``values``; None when there are none."""
    nums = [v for v in values if isinstance(v, (int, float)) and not (isinstance(v, float) and math.isnan(v))]
    return sum(nums) / len(nums) if nums else None


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def plot_run(run_dir: str | os.PathLike[str]) -> list[Path]:
    """reward.png (train vs held-out eval pass rate), signal.png (zero-signal fraction), tokens.png (the
    token ledger against rollout tokens, with the pass rates), memory.png."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    run_dir = Path(run_dir)
    all_rows = read_metrics(run_dir)
    rows = train_rows(all_rows)
    if not rows:
        return []
    written = []
    fig = reward_figure(all_rows)
    fig.savefig(run_dir / "reward.png", dpi=110)
    plt.close(fig)
    written.append(run_dir / "reward.png")
    from .ledger_view import ledger_figure   # it draws on this module

    fig = ledger_figure(all_rows)
    if fig is not None:
        fig.savefig(run_dir / "tokens.png", dpi=110)
        plt.close(fig)
        written.append(run_dir / "tokens.png")
    steps = [r["step"] for r in rows]
    panels = {
        "signal.png": ("zero-signal groups", [("zero_signal_frac", "fraction of groups"),
                                              ("zero_signal_token_frac", "fraction of tokens")]),
        "memory.png": ("peak memory (GB)", [("memory_peak_gb", "peak")]),
    }
    for name, (title, series) in panels.items():
        present = [(k, label) for k, label in series if any(r.get(k) is not None for r in rows)]
        if not present:
            continue
        fig, ax = plt.subplots(figsize=(7, 3.5))
        for key, label in present:
            _noisy_series(ax, steps, [r.get(key) for r in rows], label)
        _finish(ax, title)
        fig.tight_layout()
        fig.savefig(run_dir / name, dpi=110)
        plt.close(fig)
        written.append(run_dir / name)
    return written


def reward_figure(rows: list[dict[str, Any]]) -> Any:
    """The train curve (sampled pass rate: each step's, faint, and its moving average) and, where
    the run evaluated, the held-out curves (greedy pass rate, sampled pass@k) at their eval steps:
    distinct colours and line styles, one legend. Each line's label says what it is."""
    import matplotlib.pyplot as plt

    train = train_rows(rows)
    fig, ax = plt.subplots(figsize=(7, 3.8))
    key = "pass_rate" if any(r.get("pass_rate") is not None for r in train) else "reward_mean"
    name = "train pass rate" if key == "pass_rate" else "train reward"
    _noisy_series(ax, [r["step"] for r in train], [r.get(key) for r in train], f"{name} (sampled)",
                  color="tab:blue")
    evals = eval_rows(rows)
    styles = [("eval_greedy_pass_rate", "held-out eval: greedy pass rate", "tab:orange", "--", "o")]
    ks = sorted({int(k.split("@")[1]) for r in evals for k in r if k.startswith("eval_pass@")})
    styles += [(f"eval_pass@{k}", f"held-out eval: pass@{k}", color, ":", "s")
               for k, color in zip(ks, ("tab:green", "tab:red", "tab:purple", "tab:brown"))]
    for key, label, color, style, marker in styles:
        points = [(r["step"], r[key]) for r in evals if isinstance(r.get(key), (int, float))]
        if points:
            ax.plot(*zip(*points), color=color, linestyle=style, marker=marker, linewidth=2, label=label)
    ax.set_ylim(-0.02, 1.02)
    _finish(ax, "pass rate: train (sampled) vs held-out eval" if evals else "train pass rate (sampled)")
    fig.tight_layout()
    return fig


def _noisy_series(ax: Any, steps: list[int], values: list[Any], label: str, color: Optional[str] = None) -> None:
    """A noisy per-step series: each step faint, read through its moving average."""
    values = [v if v is not None else float("nan") for v in values]
    line, = ax.plot(steps, values, alpha=0.3, linewidth=1, color=color)
    ax.plot(steps, moving_average(values, max(1, len(values) // 10)), color=line.get_color(), linewidth=2,
            label=f"{label}, moving avg")


def _finish(ax: Any, title: str) -> None:
    ax.set_xlabel("step")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()


class Stopwatch:
    """Named wall-clock sections: the step's time split."""

    def __init__(self) -> None:
        self.totals: dict[str, float] = {}

    def section(self, name: str) -> "_Section":
        return _Section(self, name)


class _Section:
    def __init__(self, watch: Stopwatch, name: str) -> None:
        self.watch, self.name = watch, name

    def __enter__(self) -> None:
        self.t0 = time.perf_counter()

    def __exit__(self, *exc: object) -> None:
        self.watch.totals[self.name] = self.watch.totals.get(self.name, 0.0) + time.perf_counter() - self.t0
