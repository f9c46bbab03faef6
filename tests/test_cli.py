"""The proctor command line: help for every command, and doctor's JSON."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from proctor.cli.app import app

runner = CliRunner()

COMMANDS = [
    [],
    ["images"],
    ["images", "build"],
    ["images", "list"],
    ["images", "prune"],
    ["doctor"],
    ["sandbox"],
    ["sandbox", "run"],
    ["sandbox", "demo"],
]


@pytest.mark.parametrize("argv", COMMANDS, ids=lambda a: " ".join(a) or "proctor")
def test_help(argv: list[str]) -> None:
    result = runner.invoke(app, [*argv, "--help"])
    assert result.exit_code == 0, result.output
    assert "Usage" in result.output


def test_no_args_prints_help() -> None:
    result = runner.invoke(app, [])
    assert "Usage" in result.output and "images" in result.output and "doctor" in result.output


def test_unknown_image_name_is_a_usage_error() -> None:
    result = runner.invoke(app, ["images", "build", "--name", "cobol"])
    assert result.exit_code == 2


@pytest.mark.docker
def test_doctor_json_reports_engine_ok() -> None:
    result = runner.invoke(app, ["doctor", "--json"])
    assert result.exit_code in (0, 1), result.output
    report = json.loads(result.stdout)
    checks = {c["check"]: c for c in report["checks"]}
    assert checks["docker engine"]["status"] == "ok"
    assert {"torch", "cuda", "vllm", "python", "mmdebstrap"} <= set(checks)
    assert all(c["status"] in ("ok", "missing", "warn") for c in report["checks"])
    required_failed = [c for c in report["checks"] if c["required"] and c["status"] != "ok"]
    assert report["ok"] == (not required_failed) == (result.exit_code == 0)


@pytest.mark.docker
def test_build_then_list_then_doctor_passes() -> None:
    build = runner.invoke(app, ["images", "build"])
    assert build.exit_code == 0, build.output
    assert "already current" in build.output or "built" in build.output
    listing = runner.invoke(app, ["images", "list"])
    assert listing.exit_code == 0 and "present" in listing.output
    doctor = runner.invoke(app, ["doctor", "--json"])
    assert doctor.exit_code == 0, doctor.output


EXAMPLES = __import__("pathlib").Path(__file__).resolve().parent.parent / "examples" / "sandbox"


@pytest.mark.docker
def test_sandbox_run_passes_and_exits_zero(docker_ready) -> None:
    result = runner.invoke(app, ["sandbox", "run", str(EXAMPLES / "two_sum.py"),
                                 "--tests", str(EXAMPLES / "test_two_sum.py"), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["status"] == "passed" and data["passed"] is True


@pytest.mark.docker
def test_sandbox_run_cases_from_json(docker_ready) -> None:
    result = runner.invoke(app, ["sandbox", "run", str(EXAMPLES / "sum_pairs.cpp"),
                                 "--cases", str(EXAMPLES / "sum_pairs.cases.json"), "--json"])
    assert result.exit_code == 0, result.output
    assert [c["status"] for c in json.loads(result.output)["cases"]] == ["passed"] * 3


@pytest.mark.docker
def test_sandbox_run_failure_exits_one(docker_ready, tmp_path) -> None:
    prog = tmp_path / "wrong.py"
    prog.write_text("def two_sum(nums, target):\n    return []\n")
    result = runner.invoke(app, ["sandbox", "run", str(prog), "--tests", str(EXAMPLES / "test_two_sum.py")])
    assert result.exit_code == 1 and "failed" in result.output


def test_sandbox_run_bad_cases_file_names_file_and_row(tmp_path) -> None:
    prog = tmp_path / "p.py"
    prog.write_text("print(input())")
    cases = tmp_path / "cases.jsonl"
    cases.write_text('{"input": "1", "output": "1"}\n{"input": 2}\n')
    result = runner.invoke(app, ["sandbox", "run", str(prog), "--cases", str(cases)])
    assert result.exit_code == 2
    assert "cases.jsonl" in result.output and "case 2" in result.output


def test_sandbox_run_unknown_extension_says_what_to_do(tmp_path) -> None:
    prog = tmp_path / "p.kt"
    prog.write_text("fun main() {}")
    result = runner.invoke(app, ["sandbox", "run", str(prog)])
    assert result.exit_code == 2 and "--language" in result.output
