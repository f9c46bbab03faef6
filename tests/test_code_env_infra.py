"""The Code env when the sandbox cannot judge anything, and binary case rewards that stop
at the first failing case."""

from __future__ import annotations

import math

import pytest

from proctor.envs import Task
from proctor.envs.code import CodeVerifier
from proctor.sandbox import Limits

FAST = Limits(wall_s=10, cpu_s=5, memory_mb=256)


def test_no_reachable_engine_makes_every_sandboxed_sample_unjudged(tmp_path):
    verifier = CodeVerifier(limits=FAST, sandbox_options={"hosts": [f"unix://{tmp_path}/no-engine.sock"]})
    task = Task("t", "p", data={"tests": "assert add(1, 2) == 3"})
    right, no_code = verifier.verify_batch([task, task], ["```python\ndef add(a, b):\n    return a + b\n```",
                                                         "no code here"])
    assert right.status == "infra_error" and not right.scored and math.isnan(right.reward)
    assert "no-engine.sock" in right.info["error"]
    assert no_code.scored and no_code.reward == 0.0          # never needed the sandbox


@pytest.mark.docker
def test_binary_case_rewards_stop_at_the_first_failing_case(docker_ready):
    cases = [["1\n", "2\n"], ["2\n", "4\n"], ["3\n", "7\n"], ["4\n", "8\n"]]   # case 3 expects a wrong answer
    binary = Task("b", "p", data={"cases": cases})
    partial = Task("p", "p", data={"cases": cases, "partial_credit": True})
    program = "```python\nprint(int(input()) * 2)\n```"
    with CodeVerifier(limits=FAST) as verifier:
        b, p = verifier.verify_batch([binary, partial], [program, program])
    assert b.reward == 0.0 and b.info["cases"] == 3 and b.info["cases_passed"] == 2   # the 4th never ran
    assert p.reward == 0.75 and p.info["cases"] == 4                                # partial credit runs all
    assert "test case 3" in b.feedback
