"""proctor report RUN_DIR: the ledger of a run, summarised, with plots."""

from __future__ import annotations

import json

import pytest

from typer.testing import CliRunner

from proctor.cli.app import app
from proctor.trainer.report import build_report


def _write_run(run_dir, steps=20):
    rows = []
    for s in range(1, steps + 1):
        rows.append({"step": s, "reward_mean": s / steps, "zero_signal_frac": 0.5, "tokens_generated": 100,
                     "tokens_learned": 60, "zero_signal_tokens": 40, "tokens_skipped_estimate_cumulative": 10 * s,
                     "tokens_probed_cumulative": 300 * s,
                     "peak_memory_bytes": 1000 + s, "time_step_s": 0.5, "memory_peak_gb": 1e-6})
    run_dir.mkdir(parents=True)
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_report_sums_the_ledger_and_plots(tmp_path):
    _write_run(tmp_path / "run")
    rep = build_report(tmp_path / "run")
    assert rep.steps == 20 and rep.tokens_generated == 2000 and rep.tokens_learned == 1200
    assert rep.tokens_zero_signal == 800 and rep.tokens_saved_by_skip == 200 and rep.peak_memory_bytes == 1020
    assert rep.reward_first == pytest.approx(0.075) and rep.reward_last == pytest.approx(0.975)
    assert rep.seconds == pytest.approx(10.0) and rep.tokens_probed == 6000
    assert {p.name for p in rep.plots} >= {"reward.png", "signal.png", "tokens.png", "memory.png"}


def test_report_cli_json_and_missing_dir(tmp_path):
    _write_run(tmp_path / "run")
    result = CliRunner().invoke(app, ["report", str(tmp_path / "run"), "--json"])
    assert result.exit_code == 0 and json.loads(result.output)["tokens_generated"] == 2000
    result = CliRunner(env={"COLUMNS": "400"}).invoke(app, ["report", str(tmp_path / "nope")])
    assert result.exit_code == 2 and "metrics.jsonl" in result.output
