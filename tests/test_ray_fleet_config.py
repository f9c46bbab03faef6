"""The fleet's configuration without a cluster: the default path never imports Ray, a missing Ray
says how to install it, and a cluster without token authentication is refused (a real one)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from proctor.envs.code.verifier import make_sandbox
from proctor.sandbox.errors import SandboxError


def test_default_path_imports_no_ray():
    code = ("import sys\nimport proctor.sandbox, proctor.sandbox.fleet\n"
            "from proctor.envs.code.verifier import CodeVerifier, make_sandbox\n"
            "CodeVerifier(sandbox={'backend': 'docker'})\nprint('ray' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "False", out.stderr[-2000:]


def test_missing_ray_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)   # `import ray` raises ImportError
    with pytest.raises(SandboxError, match=r"pip install 'proctor\[ray\]'"):
        make_sandbox({"backend": "ray", "address": "auto"})


def test_bad_backend_and_bad_key():
    with pytest.raises(ValueError, match="sandbox.backend is 'kubernetes'; it is one of docker, ray"):
        make_sandbox({"backend": "kubernetes"})
    pytest.importorskip("ray")
    with pytest.raises(ValueError, match="sandbox.slotz is not an option of RaySandbox"):
        make_sandbox({"backend": "ray", "slotz": 3})


@pytest.mark.docker
@pytest.mark.slow
def test_unauthenticated_cluster_is_refused(docker_ready):
    """On a cluster started without token authentication no host actor starts (none touches Docker)."""
    pytest.importorskip("ray")
    script = textwrap.dedent("""
        import os
        os.environ["RAY_AUTH_MODE"] = "disabled"
        import ray
        from ray.cluster_utils import Cluster
        from proctor.sandbox.fleet import RaySandbox
        c = Cluster(initialize_head=True, head_node_args=dict(num_cpus=0, include_dashboard=False))
        c.add_node(num_cpus=1, resources={"sandbox": 1})
        ray.init(address=c.address, log_to_driver=False)
        try:
            RaySandbox(address=c.address, startup_check=())
            print("STARTED")
        except Exception as exc:
            print("REFUSED", type(exc).__name__, str(exc).replace(chr(10), " ")[:600])
        finally:
            ray.shutdown()
            c.shutdown()
    """)
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, env=env)
    line = next((x for x in out.stdout.splitlines() if x.startswith(("STARTED", "REFUSED"))), out.stderr[-2000:])
    assert line.startswith("REFUSED NoHostAvailable"), line
    assert "without token authentication" in line and "RAY_AUTH_MODE=token" in line, line


def test_prefetch_refusals():
    from proctor.sandbox.fleet.options import FleetOptions

    assert FleetOptions().prefetch is None and FleetOptions(prefetch=0).prefetch == 0   # None: the router adapts it
    for bad in (-1, 1.5, True, "4"):
        with pytest.raises(SandboxError, match="sandbox.prefetch must be an integer >= 0"):
            FleetOptions(prefetch=bad)


def test_normal_priority_undoes_rays_niceness():
    """Ray starts workers at nice 15; a host or router raises itself back to 0 (here: as root)."""
    if os.geteuid() != 0:
        pytest.skip("raising priority needs root")
    code = ("import os\nos.nice(15)\nfrom proctor.sandbox.fleet.host import normal_priority\n"
            "before = os.getpriority(os.PRIO_PROCESS, 0)\nnormal_priority()\n"
            "print(before, os.getpriority(os.PRIO_PROCESS, 0))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.split() == ["15", "0"], out.stderr[-2000:]
