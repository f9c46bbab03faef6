"""verl's SandboxFusion reward code (``verl.utils.reward_score.sandbox_fusion``, from verl 0.9.1's
wheel, which set-up downloads and does not install), unchanged, against ``proctor sandbox serve``:
``compute_score`` with stdin/stdout test cases and with assert cases, right and wrong programs,
and the token as the URL's password."""

from __future__ import annotations

import sys
import threading
import zipfile
from pathlib import Path

import pytest

from service_server import REPO, ServiceProcess

pytestmark = [pytest.mark.docker, pytest.mark.slow]
PACKAGE = "verl/utils/reward_score/sandbox_fusion/"


@pytest.fixture(scope="module")
def verl_sf(tmp_path_factory):
    wheels = sorted((REPO / ".venv/wheels").glob("verl-0.9.1-*.whl"))
    if not wheels:
        pytest.fail("verl's wheel is not in .venv/wheels: run `bash scripts/setup.sh`")
    root = tmp_path_factory.mktemp("verl")
    target = root / "verl_sandbox_fusion"
    target.mkdir()
    with zipfile.ZipFile(wheels[-1]) as wheel:
        for name in ("__init__.py", "utils.py"):
            (target / name).write_bytes(wheel.read(PACKAGE + name))
    sys.path.insert(0, str(root))
    try:
        import verl_sandbox_fusion

        yield verl_sandbox_fusion
    finally:
        sys.path.remove(str(root))


@pytest.fixture(scope="module")
def url(docker_ready, tmp_path_factory):
    service = ServiceProcess(tmp_path_factory.mktemp("verl-service"), "--pool-size", "2")
    yield f"http://verl:{service.token}@127.0.0.1:{service.port}/run_code"
    service.stop()


RIGHT = "```python\nn = int(input())\nprint(n * n)\n```"
WRONG = "```python\nn = int(input())\nprint(n + n)\n```"
CASES = {"inputs": ["2\n", "3\n", "10\n"], "outputs": ["4\n", "9\n", "100\n"]}


def test_compute_score_with_stdin_cases(verl_sf, url):
    semaphore = threading.Semaphore(4)
    score, meta = verl_sf.compute_score(url, semaphore, 1024, RIGHT, CASES)
    assert score == 1.0, meta
    score, meta = verl_sf.compute_score(url, semaphore, 1024, WRONG, CASES)
    assert score == pytest.approx(1 / 3)   # 2 + 2 == 2 * 2: one case of three passes
    assert [m.get("status") for m in meta][:3] == ["success", "wrong_answer", "wrong_answer"], meta


def test_compute_score_with_assert_cases(verl_sf, url):
    semaphore = threading.Semaphore(4)
    code = "```python\ndef add(a, b):\n    return a + b\n```"
    cases = {"assert_case": ["assert add(1, 2) == 3", "assert add(-1, 1) == 0"]}
    score, meta = verl_sf.compute_score(url, semaphore, 1024, code, cases)
    assert score == 1.0, meta
    bad = "```python\ndef add(a, b):\n    return a - b\n```"
    score, _ = verl_sf.compute_score(url, semaphore, 1024, bad, {"assert_case": ["assert add(1, 2) == 3"]})
    assert score == 0.0


def test_a_program_that_loops_scores_zero_and_is_a_timeout(verl_sf, url):
    loop = "```python\nwhile True:\n    pass\n```"
    score, meta = verl_sf.compute_score(url, threading.Semaphore(2), 1024, loop,
                                        {"inputs": ["1\n"], "outputs": ["1\n"]}, timeout=1)
    assert score == 0.0
    assert "timeout" in str(meta).lower() or "TimeLimitExceeded" in str(meta)
