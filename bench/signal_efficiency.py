"""Learning signal per rollout token: ten arms choosing prompts, side by side, >= 3 seeds each.

Every arm is the main job (``examples/train/arithmetic_tiny.yaml``: the tiny model, procedural
arithmetic, held-out eval on questions disjoint from training by their canonical form) with
the prompt selection changed. The baseline and the other rules take B = 8 prompts x G = 8
completions per step; the default takes the main job's own budget (B x G = 8 x 4 = 32 completions,
over prompts whose groups the answer probe sizes from 3 to 8), ``probe-40`` the same with 40
completions a step (the default before 2026-12-07's twelfth session), ``probe-fixed`` the same probe
with every group G = 5, and ``uniform-batch`` is uniform sampling at the main job's B and G (the
control: what the smaller groups do without the selection); the two ``-small`` arms ask whether
fewer prompts per step (B = 4) buy the same for half the tokens:

    uniform        prompts drawn uniformly, every group kept, B = 8 x G = 8 (the baseline)
    uniform-batch  prompts drawn uniformly at the main job's B and G (8 x 4: the control for its batch)
    dapo           DAPO dynamic sampling: zero-signal groups dropped after they are paid for, redrawn
    skip           pre-rollout skipping from each prompt's own record (GRESO's rule: its last group
                   taught nothing; or the posterior predicts so), drawn anyway 10% of the time
    adaptive       the difficulty frontier: levels whose predicted pass rate is in the target band
    probe-40       the default's probe and sized groups with 40 completions a step (B x G = 8 x 5)
    probe-fixed    the answer probe with one group size, G = 5 (the default before sized groups)
    probe-small    the answer probe at B = 4, G = 5
    uniform-small  uniform sampling at B = 4 (the control: what the smaller batch does alone)
    default        the main job's own settings, unchanged (Proctor's default: the answer probe)

Printed per arm (mean over seeds): the final held-out score (pass@1 of samples at the
training temperature, from 4 per question: the expected reward on unseen questions), the rollout tokens
it took to first reach the uniform arm's final held-out score at an evaluation (and the ratio
to uniform's; beside it, the ratio read between evaluations on a straight line, an estimate:
the evaluations 50 steps apart make the first reading up to 50 steps late), and the share of rollout tokens that taught nothing (zero-signal groups, kept or dropped); beside
them, what the answer probe read (forward-only tokens, not generated) and the seconds of training
steps (evaluations left out). Drawn: held-out pass rate against rollout tokens, one line per arm (``signal_efficiency.png``).

    .venv/bin/python bench/signal_efficiency.py [--seeds 0 1 2] [--steps N] [--jobs 2] [--out DIR]
    .venv/bin/python bench/signal_efficiency.py --arms uniform default --models tiny:1500 tiny:3000

With ``--models``, every arm runs on each base model (a weak and a strong policy start from
different pass rates, and the best selection rule depends on that); the table is printed per
model, then each arm's gain over uniform on every model and its worst.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import cpu_model, usable_cpus  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
MAIN_JOB = ROOT / "examples/train/arithmetic_tiny.yaml"
DROP = "<drop>"   # a key the arm removes from the main job's config (its default then applies)
OFF = {"data": {"dynamic_sampling": False, "skip_predicted_zero_signal": False, "target_pass_rate": None,
                "difficulty_envs": None, "skip_reweight": False, "skip_after": 0, "answer_probe": False,
                "skip_explore": 0.1},
       "rollout": {"adaptive_group_size": DROP}}
FIXED_G = {"rollout": {"adaptive_group_size": DROP, "group_size": 5}}
BATCH8 = {"data": {"prompts_per_step": 8}, "rollout": {"group_size": 8}}


def merged(*parts: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Config sections merged key by key, later parts winning."""
    out: dict[str, dict[str, Any]] = {}
    for part in parts:
        for section, values in part.items():
            out[section] = {**out.get(section, {}), **values}
    return out


ARMS: dict[str, dict[str, dict[str, Any]]] = {
    "uniform": merged(OFF, BATCH8),
    "uniform-batch": OFF,
    "dapo": merged(OFF, BATCH8, {"data": {"dynamic_sampling": True, "max_resample_rounds": 1}}),
    "skip": merged(OFF, BATCH8, {"data": {"skip_predicted_zero_signal": True, "skip_after": 1,
                                          "skip_threshold": 0.8}}),
    "adaptive": merged(OFF, BATCH8, {"data": {"target_pass_rate": [0.2, 0.8]}}),
    "probe-40": {"rollout": {"group_size": 5}},
    "probe-fixed": FIXED_G,
    "probe-small": merged(FIXED_G, {"data": {"prompts_per_step": 4}}),
    "uniform-small": merged(OFF, {"data": {"prompts_per_step": 4}}),
    "default": {},
}


def arm_config(base: dict[str, Any], arm: str, seed: int, steps: int | None, out: Path) -> dict[str, Any]:
    cfg = json.loads(json.dumps(base))
    for section, values in ARMS[arm].items():
        cfg[section] = {k: v for k, v in {**cfg.get(section, {}), **values}.items() if v != DROP}
    cfg.update(seed=seed, output_dir=str(out))
    if steps is not None:
        cfg["max_steps"] = steps
    cfg.setdefault("log", {})["log_every"] = 10**6   # the console stays quiet; metrics.jsonl has every step
    return cfg


def finished(out: Path, text: str) -> bool:
    """A run already in ``out`` with exactly this config that reached its last step (reused)."""
    config, metrics = out / "config.yaml", out / "metrics.jsonl"
    if not (config.exists() and metrics.exists()) or config.read_text() != text:
        return False
    last = max((json.loads(line).get("step", 0) for line in metrics.read_text().splitlines() if line.strip()), default=0)
    return last >= yaml.safe_load(text)["max_steps"]


def run_one(base: dict[str, Any], arm: str, seed: int, steps: int | None, out: Path, reuse: bool) -> Path:
    """One training run in its own process (one torch thread), its metrics.jsonl path."""
    out.mkdir(parents=True, exist_ok=True)
    config = out / "config.yaml"
    text = yaml.safe_dump(arm_config(base, arm, seed, steps, out))
    if reuse and finished(out, text):
        print(f"  reused: {arm} seed {seed} ({out})", flush=True)
        return out / "metrics.jsonl"
    config.write_text(text)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    with open(out / "train.log", "w") as log:
        done = subprocess.run([sys.executable, "-m", "proctor", "train", "--config", str(config)],
                              stdout=log, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
    if done.returncode != 0:
        raise RuntimeError(f"{arm} seed {seed} failed (exit {done.returncode}); see {out / 'train.log'}")
    print(f"  done: {arm} seed {seed}", flush=True)
    return out / "metrics.jsonl"


def same_settings(base: dict[str, Any], arms: list[str], steps: int | None) -> dict[str, str]:
    """Arm → an earlier arm whose runs would be identical (the same config but for the output
    directory): its runs are not repeated."""
    seen: dict[str, str] = {}
    twins = {}
    for arm in arms:
        cfg = arm_config(base, arm, 0, steps, Path("."))
        cfg.pop("output_dir")
        key = json.dumps(cfg, sort_keys=True)
        if key in seen:
            twins[arm] = seen[key]
        else:
            seen[key] = arm
    return twins


METRIC = "eval_pass@1"   # the held-out score: the sampled pass rate, the expected reward GRPO raises


def curve(metrics: Path, metric: str = METRIC) -> dict[str, list[float]]:
    """Per evaluation: step, rollout tokens so far (training only), the held-out score; and the
    run's zero-signal token total."""
    rows = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
    tokens = {0: 0}
    zero = total = probed = 0
    seconds = 0.0
    for r in rows:
        if "tokens_cumulative" in r:
            tokens[r["step"]] = r["tokens_cumulative"]
            zero, total = r["tokens_zero_signal_cumulative"], r["tokens_cumulative"]
            probed = r.get("tokens_probed_cumulative", 0)
            seconds += r.get("time_step_s", 0.0)
    evals = [r for r in rows if metric in r]
    if not evals:
        raise ValueError(f"{metrics}: no evaluation row has {metric!r}; the job must evaluate it (eval.k: [1])")
    return {"step": [r["step"] for r in evals], "tokens": [tokens[r["step"]] for r in evals],
            "held_out": [r[metric] for r in evals], "greedy": [r.get("eval_greedy_pass_rate") for r in evals],
            "zero_signal_tokens": zero, "rollout_tokens": total, "probed_tokens": probed, "step_seconds": seconds}


def mean_curve(curves: list[dict[str, Any]]) -> dict[str, list[float]]:
    """Seeds averaged at each evaluation step (every seed evaluates at the same steps)."""
    n = min(len(c["step"]) for c in curves)
    avg = lambda key: [sum(c[key][i] for c in curves) / len(curves) for i in range(n)]  # noqa: E731
    return {"step": curves[0]["step"][:n], "tokens": avg("tokens"), "held_out": avg("held_out")}


def tokens_to_reach(mean: dict[str, list[float]], target: float) -> float | None:
    """Rollout tokens at the first evaluation whose seed-mean held-out score reaches ``target``."""
    return next((t for t, h in zip(mean["tokens"], mean["held_out"]) if h >= target - 1e-9), None)


def tokens_to_reach_between(mean: dict[str, list[float]], target: float) -> float | None:
    """The same, read between evaluations: tokens where the straight line from the last seed-mean
    score below ``target`` to the first at or above it crosses it (an estimate: evaluations
    come every 50 steps, so the first one at or above the target can be up to 50 steps late)."""
    points = list(zip(mean["tokens"], mean["held_out"]))
    for i, (t, h) in enumerate(points):
        if h >= target - 1e-9:
            if i == 0:
                return t
            (t0, h0) = points[i - 1]
            return t0 + (t - t0) * (target - h0) / (h - h0)
    return None


def summarise(results: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    means = {arm: mean_curve(curves) for arm, curves in results.items()}
    target = means["uniform"]["held_out"][-1]
    uniform_tokens = tokens_to_reach(means["uniform"], target)
    uniform_between = tokens_to_reach_between(means["uniform"], target)
    table = {}
    for arm, curves in results.items():
        reach = tokens_to_reach(means[arm], target)
        between = tokens_to_reach_between(means[arm], target)
        table[arm] = {
            "final_held_out": means[arm]["held_out"][-1],
            "final_greedy": sum(c["greedy"][-1] for c in curves) / len(curves),
            "final_held_out_seeds": [c["held_out"][-1] for c in curves],
            "tokens_to_uniform_final": reach,
            "ratio_vs_uniform": None if reach is None or not uniform_tokens else reach / uniform_tokens,
            "tokens_to_uniform_final_between": between,
            "ratio_vs_uniform_between": None if between is None or not uniform_between else between / uniform_between,
            "zero_signal_share": sum(c["zero_signal_tokens"] for c in curves) / sum(c["rollout_tokens"] for c in curves),
            "rollout_tokens": sum(c["rollout_tokens"] for c in curves) / len(curves),
            "probed_tokens": sum(c.get("probed_tokens", 0) for c in curves) / len(curves),
            "step_seconds": sum(c.get("step_seconds", 0.0) for c in curves) / len(curves),
            "curve": means[arm],
        }
    return {"target": target, "arms": table}


def print_table(summary: dict[str, Any], seeds: list[int]) -> None:
    print(f"\nheld-out target = uniform's final score {summary['target']:.3f} (mean of {len(seeds)} seeds)")
    head = f"{'arm':<14}{'held-out pass@1':>16}{'greedy':>8}{'tokens to target':>18}{'x fewer than uniform':>22}" \
           f"{'(interpolated)':>16}{'zero-signal share':>19}{'rollout tokens':>16}{'probed (fwd)':>14}{'step s':>8}"
    print(head + "\n" + "-" * len(head))
    for arm, r in summary["arms"].items():
        reach = "not reached" if r["tokens_to_uniform_final"] is None else f"{r['tokens_to_uniform_final']:,.0f}"
        ratio = "-" if r["ratio_vs_uniform"] is None else f"{1 / r['ratio_vs_uniform']:.2f}x"
        between = "-" if r["ratio_vs_uniform_between"] is None else f"{1 / r['ratio_vs_uniform_between']:.2f}x"
        print(f"{arm:<14}{r['final_held_out']:>16.3f}{r['final_greedy']:>8.3f}{reach:>18}{ratio:>22}{between:>16}"
              f"{r['zero_signal_share']:>19.1%}{r['rollout_tokens']:>16,.0f}{r['probed_tokens']:>14,.0f}"
              f"{r['step_seconds']:>8.0f}")


def plot(summary: dict[str, Any], results: dict[str, list[dict[str, Any]]], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    for arm, curves in results.items():
        mean = summary["arms"][arm]["curve"]
        line, = ax.plot(mean["tokens"], mean["held_out"], label=arm, linewidth=2)
        for c in curves:
            ax.plot(c["tokens"], c["held_out"], color=line.get_color(), alpha=0.2, linewidth=1)
    ax.axhline(summary["target"], color="grey", linestyle=":", label="uniform's final")
    ax.set_xlabel("rollout tokens (training)")
    ax.set_ylabel(f"held-out {METRIC.removeprefix('eval_')} (sampled, temperature 1)")
    ax.set_title("held-out score per rollout token (thin: seeds, thick: their mean)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def rel(path: Path) -> Path:
    return path.relative_to(ROOT) if path.is_relative_to(ROOT) else path


def model_slug(model: str) -> str:
    return model.replace(":", "-").replace("/", "-")


def run_all(base: dict[str, Any], models: list[str], args: argparse.Namespace,
            twins: dict[str, str]) -> dict[str, dict[str, list[dict[str, Any]]]]:
    """Every (model, arm, seed) run, ``args.jobs`` at a time: model -> arm -> one curve per seed."""
    out = {m: (args.out / model_slug(m) if len(models) > 1 else args.out) for m in models}
    runs = [(m, arm, seed) for m in models for seed in args.seeds for arm in args.arms if arm not in twins]
    with ThreadPoolExecutor(args.jobs) as pool:
        futures = {(m, arm, seed): pool.submit(run_one, {**base, "model": m}, arm, seed, args.steps,
                                               out[m] / f"{arm}-s{seed}", args.reuse)
                   for m, arm, seed in runs}
        return {m: {arm: [curve(futures[(m, twins.get(arm, arm), s)].result()) for s in args.seeds]
                    for arm in args.arms} for m in models}


def print_across_models(summaries: dict[str, dict[str, Any]]) -> None:
    """Each arm's gain over uniform on every model: a rule is only as good as its worst model."""
    print("\nx fewer rollout tokens than uniform to uniform's final score, by model, and the worst")
    arms = next(iter(summaries.values()))["arms"]
    print(f"{'arm':<14}" + "".join(f"{m:>14}" for m in summaries) + f"{'worst':>10}")
    for arm in arms:
        rows = [summaries[m]["arms"][arm] for m in summaries]
        # never: the arm did not reach uniform's final score; -: uniform's own first evaluation did
        gains = [r["ratio_vs_uniform"] and 1 / r["ratio_vs_uniform"] for r in rows]
        cells = "".join(f"{'never' if r['tokens_to_uniform_final'] is None else '-' if g is None else f'{g:.2f}x':>14}"
                        for r, g in zip(rows, gains))
        known = [g for g in gains if g is not None]
        worst = "never" if any(r["tokens_to_uniform_final"] is None for r in rows) else \
            f"{min(known):.2f}x" if known else "-"
        print(f"{arm:<14}{cells}{worst:>10}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=None, help="optimizer steps per run (default: the main job's)")
    parser.add_argument("--arms", nargs="+", default=list(ARMS), choices=list(ARMS))
    parser.add_argument("--models", nargs="+", default=None,
                        help="judge every arm on each of these base models (e.g. tiny:1500 tiny:3000: a weaker "
                             "and a stronger policy); default: the config's model")
    parser.add_argument("--jobs", type=int, default=max(1, usable_cpus()), help="runs at once (one core each)")
    parser.add_argument("--config", type=Path, default=MAIN_JOB, help="the job every arm starts from")
    parser.add_argument("--out", type=Path, default=ROOT / "runs/bench-signal-efficiency")
    parser.add_argument("--reuse", action="store_true",
                        help="keep runs already in --out whose config is unchanged and that finished")
    args = parser.parse_args()
    if "uniform" not in args.arms:
        parser.error("--arms must include uniform: every other arm is measured against it")
    base = yaml.safe_load(args.config.read_text())
    models = args.models or [base["model"]]
    twins = same_settings(base, args.arms, args.steps)
    n_runs = len(models) * (len(args.arms) - len(twins)) * len(args.seeds)
    print(f"{n_runs} runs ({len(models)} model(s) x {len(args.arms) - len(twins)} arms x {len(args.seeds)} seeds), "
          f"{args.jobs} at a time, from {rel(args.config)}", flush=True)
    for arm, twin in twins.items():
        print(f"  {arm} has {twin}'s settings: its runs are {twin}'s", flush=True)
    results = run_all(base, models, args, twins)
    summaries = {}
    for model in models:
        summary = summarise(results[model])
        print(f"\n== model {model}")
        print_table(summary, args.seeds)
        summary.update(date=datetime.date.today().isoformat(), machine=f"{cpu_model()}, {usable_cpus()} CPUs",
                       seeds=args.seeds, config=str(args.config), model=model,
                       steps=args.steps or base.get("max_steps"), runs=results[model])
        summaries[model] = summary
    if len(models) > 1:
        print_across_models(summaries)
    args.out.mkdir(parents=True, exist_ok=True)
    one = len(models) == 1
    (args.out / "summary.json").write_text(json.dumps(summaries[models[0]] if one else {"models": summaries}, indent=1))
    for model in models:
        name = "signal_efficiency.png" if one else f"signal_efficiency-{model_slug(model)}.png"
        plot(summaries[model], results[model], args.out / name)
    print(f"\nwritten: {args.out / 'summary.json'} and the plots beside it")


if __name__ == "__main__":
    main()
