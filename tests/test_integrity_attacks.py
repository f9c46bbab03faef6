"""The integrity attack battery (tests/integrity_attacks.py) against the real sandbox, under runc and gVisor.

Each attack is a wrong solution or a hostile program that would be scored ``passed``
(or dodge a zero reward with ``infra_error``) if its trick worked. A test passes when
the attack is contained: its status is one of ``attack.allowed`` and a correct job of
the same language, run right after it in the same container, passes at its first
attempt. A failure names the breach: FORGED pass, infra_error, a broken container.
An attack marked ``residual`` for a runtime (a native program reading its own memory or
binary, Java reflection on the tests' classes: what a harness inside the program's own
process cannot prevent, docs/threat-model.md "Threat model") may breach there; it is recorded, and
must still end without infra_error and leave a clean container.

One sandbox per runtime with a single container (``slots=1, spare=0``), so a setup job,
the attack and the benign job after it share a container; the attacks are ordered by
language to keep container switches few. The gVisor half skips, naming the reason,
where gVisor cannot run (tests/gvisor.py).

``PROCTOR_INTEGRITY_REPORT=path.jsonl`` appends one JSON line per attack (runtime,
class, language, name, status, outcome), for a summary table.
"""

from __future__ import annotations

import json
import os
import re
import time
from typing import Optional

import pytest
from gvisor import require_gvisor
from integrity_attacks import ATTACKS, Attack, benign_job
from proctor.sandbox import BadJob, Result, Sandbox

pytestmark = pytest.mark.docker

REPORT = os.environ.get("PROCTOR_INTEGRITY_REPORT")


@pytest.fixture(scope="module", params=["runc", "runsc"])
def sandbox(request, docker_ready):
    runtime = require_gvisor() if request.param == "runsc" else None
    with Sandbox(slots=1, spare=0, auto_build=True, runtime=runtime) as sb:
        yield sb


def explain(r: Result) -> str:
    return (f"status={r.status} exit={r.exit_code} attempts={r.attempts} wall={r.wall_s:.2f}s\n"
            f"  stdout={r.stdout[-400:]!r}\n  stderr={r.stderr[-800:]!r}\n  error={r.error[-800:]!r}")


def outcome_of(attack: Attack, r: Result) -> str:
    if r.status == "passed":
        # Cross-job attacks pass when something of the earlier job reached them.
        return "LEAKED" if attack.setup is not None else "FORGED pass"
    if r.status == "infra_error":
        return "infra_error"
    return "contained" if r.status in attack.allowed else f"unexpected {r.status}"


def containers_replaced(sb: Sandbox) -> int:
    return sum(pool.recycled for pool in sb.pools)


def record(runtime: str, attack: Attack, **fields: object) -> None:
    if not REPORT:
        return
    line = {"runtime": runtime, "cls": attack.cls, "language": attack.language, "name": attack.name, **fields}
    with open(REPORT, "a") as f:
        f.write(json.dumps(line) + "\n")


def attack_id(attack: Attack) -> str:
    return re.sub(r"[^\w.+$#-]+", "-", f"{attack.cls}/{attack.name}").strip("-")


@pytest.mark.parametrize("attack", ATTACKS, ids=attack_id)
def test_attack_is_contained(sandbox: Sandbox, attack: Attack, request) -> None:
    runtime = request.node.callspec.params["sandbox"]
    t0 = time.monotonic()
    try:
        job = attack.build()
    except BadJob as exc:
        record(runtime, attack, status="BadJob", outcome="contained (BadJob)", detail=str(exc)[:300])
        assert attack.cls == "validation", f"BadJob for a job that is valid: {exc}"
        return
    problems: list[str] = []

    if attack.setup is not None:
        before = containers_replaced(sandbox)
        setup = sandbox.run(attack.setup)
        if setup.status != "passed":
            record(runtime, attack, status=f"setup {setup.status}", outcome="setup failed")
            pytest.fail(f"the setup job did not pass, so the attack proves nothing:\n{explain(setup)}")
        if containers_replaced(sandbox) != before:
            # The sandbox replaced the container the setup used: nothing of it can reach the attack.
            record(runtime, attack, status="-", outcome="contained (container replaced after the setup)")
            return

    result: Optional[Result] = None
    try:
        result = sandbox.run(job)
    except Exception as exc:   # noqa: BLE001 - the sandbox must never raise for what a job holds
        problems.append(f"Sandbox.run raised {type(exc).__name__}: {exc}")
    if result is not None:
        outcome = outcome_of(attack, result)
        residual = runtime in attack.residual and outcome in ("FORGED pass", "LEAKED")
        if outcome != "contained" and not residual:
            problems.append(f"{outcome} (allowed: {', '.join(attack.allowed)}): {explain(result)}")
        if attack.setup is not None and result.attempts > 1:
            problems.append(f"the job after the setup needed {result.attempts} attempts: the setup left its "
                            f"container broken for the next job")

    benign = sandbox.run(benign_job(attack.language, job.effective_limits))
    if benign.status != "passed" or benign.attempts != 1:
        problems.append(f"a correct {attack.language} job right after the attack: {explain(benign)}")

    record(runtime, attack, status=result.status if result else "raised",
           attempts=result.attempts if result else 0,
           outcome=outcome_of(attack, result) if result else "raised",
           benign=f"{benign.status}/{benign.attempts}", seconds=round(time.monotonic() - t0, 2),
           detail=(result.stderr[-300:] + result.error[-300:]) if result else problems[0][-300:])
    assert not problems, f"[{attack.cls}] {attack.name} ({runtime}):\n" + "\n".join(problems)
