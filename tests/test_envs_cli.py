"""proctor envs list|check and proctor eval."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from proctor.cli.app import app

runner = CliRunner(env={"COLUMNS": "400"})   # error boxes must not wrap what the tests read
EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "envs" / "palindrome_env.py"


def test_envs_list_shows_builtins():
    result = runner.invoke(app, ["envs", "list"])
    assert result.exit_code == 0 and "proctor/Math-v0" in result.output and "proctor/Countdown-v0" in result.output


def test_envs_check_example_passes():
    result = runner.invoke(app, ["envs", "check", f"{EXAMPLE}:make_env"])
    assert result.exit_code == 0, result.output
    assert "all 7 checks passed" in result.output


def test_envs_check_reports_a_broken_env(tmp_path):
    bad = tmp_path / "bad_env.py"
    bad.write_text(
        "from proctor.envs import ListSource, Task, VerifiableEnv, Verifier, exact_verdict\n"
        "class Always(Verifier):\n"
        "    def verify(self, task, completion):\n"
        "        return exact_verdict(True)\n"
        "def make():\n"
        "    return VerifiableEnv(ListSource([Task('a', 'q', 'x'), Task('b', 'r', 'y')]), Always())\n")
    result = runner.invoke(app, ["envs", "check", f"{bad}:make"])
    assert result.exit_code == 1 and "FAIL" in result.output and "reward hack" in result.output


def test_envs_check_unknown_target_says_what_exists():
    result = runner.invoke(app, ["envs", "check", "proctor/Nope-v0"])
    assert result.exit_code == 2 and "registered" in result.output


def test_eval_scores_a_file_and_writes_rows(tmp_path):
    from proctor.envs.procedural.countdown import CountdownSource

    tasks = CountdownSource(6, level=2).tasks
    rows = [{"task_id": t.id, "completion": f"<answer>{t.data['solution']}</answer>" if i % 2 == 0 else "no idea"}
            for i, t in enumerate(tasks)]
    path = tmp_path / "completions.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    result = runner.invoke(app, ["eval", "--env", "proctor/Countdown-v0", "--kwargs", '{"n": 6}',
                                 "--completions", str(path)])
    assert result.exit_code == 0, result.output
    out = [json.loads(line) for line in (tmp_path / "completions.results.jsonl").read_text().splitlines()]
    assert [r["correct"] for r in out] == [True, False, True, False, True, False]
    assert "judged" in result.output


def test_eval_bad_row_names_file_row_and_field(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_text('{"task_id": "x", "completion": "a"}\n{"task_id": "y"}\n')
    result = runner.invoke(app, ["eval", "--env", "proctor/Countdown-v0", "--completions", str(path)])
    assert result.exit_code == 2 and "row 2" in result.output and "completion" in result.output
