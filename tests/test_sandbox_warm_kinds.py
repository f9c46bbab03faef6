"""The pool keeps several container kinds warm: a batch that mixes languages does not swap
containers at each change of language, and a full pool evicts the kind idle longest.

Counts container starts (``Sandbox.stats()``), on the real engine.
"""

import pytest

from proctor.sandbox import Job, Sandbox, SandboxError

PY = Job("python", "print(1)")
JS = Job("javascript", "console.log(1)")
CPP = Job("cpp", "int main() { return 0; }")


def started(sb: Sandbox) -> int:
    return sb.stats()[sb.pools[0].host]["started"]


def test_alternating_languages_reuse_their_containers(docker_ready):
    with Sandbox(slots=1, spare=0, warm_kinds=2, auto_build=True, startup_check=()) as sb:
        for job in (PY, JS, PY, JS, PY):
            assert sb.run(job).passed
        assert started(sb) == 2          # one container per language, each reused


def test_one_warm_kind_swaps_at_every_change(docker_ready):
    # The behaviour warm_kinds replaces: a full pool evicts the other language's container.
    with Sandbox(slots=1, spare=0, warm_kinds=1, auto_build=True, startup_check=()) as sb:
        for job in (PY, JS, PY, JS):
            assert sb.run(job).passed
        assert started(sb) == 4


def test_a_full_pool_evicts_the_kind_idle_longest(docker_ready):
    with Sandbox(slots=1, spare=0, warm_kinds=2, auto_build=True, startup_check=()) as sb:
        for job in (PY, JS, PY):        # python was idle last, javascript idle longest
            assert sb.run(job).passed
        assert sb.run(CPP).passed       # full: evicts javascript's container, not python's
        assert started(sb) == 3
        assert sb.run(PY).passed
        assert started(sb) == 3          # python's container was kept
        assert sb.run(JS).passed
        assert started(sb) == 4          # javascript's was not


@pytest.mark.parametrize("bad", [0, -1, 1.5, "2"])
def test_warm_kinds_must_be_a_whole_number(bad):
    with pytest.raises(SandboxError, match="warm_kinds"):
        Sandbox(warm_kinds=bad)
