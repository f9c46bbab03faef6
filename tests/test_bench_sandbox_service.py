"""bench/sandbox_service.py's own parts: every C++ program of its job set gets the verdict the
bench expects of it from the real sandbox, HumanEval's wrong and looping variants are what
they claim, and /run_code answers (SandboxFusion's schema) map to the right verdicts."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

from service_arms import proctor_job, result_verdict, run_code_verdict  # noqa: E402
from service_bench_jobs import CPP_PROGRAMS, KINDS, jobs_of_kind, stdout_matches  # noqa: E402


def test_every_kind_has_its_jobs_and_expected_verdict() -> None:
    for kind in KINDS:
        jobs = jobs_of_kind(kind)
        assert len(jobs) == (164 if kind.startswith("python") else len(CPP_PROGRAMS))
        assert {j.expected for j in jobs} == {kind.split()[1].replace("right", "pass").replace("wrong", "fail")}
    wrong = jobs_of_kind("cpp wrong")
    right = jobs_of_kind("cpp right")
    assert all(w.code != r.code for w, r in zip(wrong, right)), "every bug must change its program"
    with pytest.raises(ValueError, match="kind must be one of"):
        jobs_of_kind("rust right")


def test_numbered_jobs_differ_only_by_their_first_line() -> None:
    job = jobs_of_kind("cpp right")[0]
    a, b = job.numbered("x"), job.numbered("y")
    assert a.code != b.code and a.code.split("\n", 1)[1] == job.code
    assert a.code.startswith("// bench job x")
    assert jobs_of_kind("python right")[0].numbered("x").code.startswith("# bench job x")


def test_stdout_rule() -> None:
    assert stdout_matches("a 1  \nb 2\n\n", "a 1\nb 2")
    assert not stdout_matches("a 1\nb 2\n", "a 1\nb 3\n")
    assert not stdout_matches(" 5\n", "5\n")   # leading white space counts


def test_run_code_answers_map_to_verdicts() -> None:
    ok = {"status": "Success", "run_result": {"status": "Finished", "return_code": 0, "stdout": "5\n"}}
    assert run_code_verdict(ok, None).verdict == "pass"
    assert run_code_verdict(ok, "5").verdict == "pass"
    assert run_code_verdict(ok, "6").verdict == "fail"
    failed = {"status": "Failed", "run_result": {"status": "Finished", "return_code": 1, "stderr": "AssertionError"}}
    assert run_code_verdict(failed, None).verdict == "fail"
    tle = {"status": "Failed", "run_result": {"status": "TimeLimitExceeded", "return_code": None}}
    assert run_code_verdict(tle, None).verdict == "timeout"
    ctle = {"status": "Failed", "compile_result": {"status": "TimeLimitExceeded"}, "run_result": None}
    assert run_code_verdict(ctle, None).verdict == "timeout"
    assert run_code_verdict({"status": "SandboxError", "message": "boom"}, None).verdict == "infra"
    assert run_code_verdict({"status": "Weird"}, None).verdict == "infra"


def test_cpp_programs_get_their_expected_verdicts(sandbox) -> None:
    """All 20 right and 20 buggy programs, and two spinning ones, through the real sandbox."""
    jobs = jobs_of_kind("cpp right") + jobs_of_kind("cpp wrong") + jobs_of_kind("cpp timeout")[:2]
    results = sandbox.run_many([proctor_job(j) for j in jobs])
    got = [(j.kind, j.name, result_verdict(r).verdict) for j, r in zip(jobs, results)]
    assert [g for g, j in zip(got, jobs) if g[2] != j.expected] == []


def test_humaneval_variants_get_their_expected_verdicts(sandbox) -> None:
    """A sample of the right, wrong (return None) and looping HumanEval jobs."""
    jobs = (jobs_of_kind("python right")[::16] + jobs_of_kind("python wrong")[::16]
            + jobs_of_kind("python timeout")[:1])
    results = sandbox.run_many([proctor_job(j) for j in jobs])
    got = [(j.kind, j.name, result_verdict(r).verdict) for j, r in zip(jobs, results)]
    assert [g for g, j in zip(got, jobs) if g[2] != j.expected] == []


def test_mixed_rounds_give_every_arm_every_kind_in_one_order() -> None:
    # The bench's own bookkeeping for --mixed: arms that answer each job's expected verdict.
    from sandbox_service import measure_mixed
    from service_arms import Arm, Outcome

    seen: dict[str, list[list[str]]] = {"lib_batch": [], "lib_run": []}

    def batch(jobs):
        seen["lib_batch"].append([j.kind for j in jobs])
        return [Outcome(j.expected) for j in jobs]

    def one(job):
        return Outcome(job.expected)

    arms = [Arm("lib_batch", True, one, batch), Arm("lib_run", False, one, batch)]
    counts = {"python right": 5, "python wrong": 2, "cpp right": 1, "cpp timeout": 1}
    tallies, loads, elapsed = measure_mixed(arms, counts, rounds=2, conc=2)
    assert len(loads) == 2 and all(elapsed[a] > 0 for a in ("lib_batch", "lib_run"))
    kinds = seen["lib_batch"]
    assert len(kinds) == 2 and sorted(kinds[0]) == sorted(k for k, n in counts.items() for _ in range(n))
    assert kinds[0] != sorted(kinds[0], key=list(KINDS).index)   # shuffled, not kind by kind
    for name in ("lib_batch", "lib_run"):
        t = tallies[name]
        assert {k: t[k].jobs for k in counts} == {k: 2 * n for k, n in counts.items()}
        assert all(t[k].agree == t[k].jobs and t[k].elapsed_s == 0.0 for k in counts)
    assert len(tallies["lib_run"]["python right"].latencies_ms) == 10 and not tallies["lib_batch"]["python right"].latencies_ms
