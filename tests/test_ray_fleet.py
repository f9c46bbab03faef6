"""The sandbox fleet on a real local Ray cluster: a head without sandbox, and two sandbox nodes
(one CPU and the ``sandbox`` resource each), node A on this machine's Docker engine and node B
on a second, private dockerd (tests/second_dockerd.py), token authentication on.

Every verdict is checked against the truth each job was built with: job i passes iff
i % 3 != 0, and prints its index, so a result handed back in the wrong place is caught.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import threading
import time

import pytest

ray = pytest.importorskip("ray", reason="the fleet needs Ray: pip install 'proctor[ray]'")

from second_dockerd import SecondEngine, can_run_dockerd  # noqa: E402

from proctor.sandbox import Job, Limits  # noqa: E402
from proctor.sandbox.engine import connect  # noqa: E402
from proctor.sandbox.images import require_image  # noqa: E402

pytestmark = pytest.mark.docker
AUTH = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN")


def job(i: int, sleep_s: float = 0.0) -> Job:
    code = f"import time\ntime.sleep({sleep_s})\nprint('job {i}')\n" if sleep_s else f"print('job {i}')\n"
    return Job(language="python", code=code, tests=f"assert {i} % 3 != 0\n", limits=Limits(wall_s=10))


def truth(i: int) -> str:
    return "passed" if i % 3 else "failed"


def check(results, first: int = 0, allow_infra: bool = False) -> int:
    """Every result is its job's right verdict (or infra_error where allowed), in job order; the infra count."""
    infra = 0
    for i, r in enumerate(results, first):
        if r.status == "infra_error" and allow_infra:
            infra += 1
            assert r.error and not r.passed
            continue
        assert r.status == truth(i), (i, r.status, r.error, r.stderr[-300:])
        assert f"job {i}\n" in r.stdout, (i, r.stdout)
    return infra


@pytest.fixture(scope="module")
def cluster(docker_ready):
    problem = can_run_dockerd()
    if problem:
        pytest.skip(f"a second Docker engine cannot run here: {problem}")
    saved = {k: os.environ.get(k) for k in AUTH}
    os.environ.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=secrets.token_hex(16))
    reload_auth()
    from ray.cluster_utils import Cluster

    engine = SecondEngine()
    c = None
    try:
        engine.start()
        local = connect()
        engine.load_images([require_image(local, "python")], source=local)
        c = Cluster(initialize_head=True, head_node_args=dict(num_cpus=0, include_dashboard=False))
        a = c.add_node(num_cpus=1, resources={"sandbox": 1})
        b = c.add_node(num_cpus=1, resources={"sandbox": 1}, env_vars={"DOCKER_HOST": engine.url})
        ray.init(address=c.address, log_to_driver=False)
        yield {"cluster": c, "a": a, "b": b, "engine": engine, "local": local}
    finally:
        ray.shutdown()
        if c is not None:
            c.shutdown()
        engine.stop()
        for k, v in saved.items():
            os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)
        reload_auth()


def reload_auth() -> None:
    """Ray reads RAY_AUTH_MODE and the token once per process: read them again (as `ray start` does)."""
    from ray._raylet import AuthenticationTokenLoader, Config

    Config.initialize("")
    AuthenticationTokenLoader.instance().reset_cache()


@pytest.fixture(scope="module")
def fleet(cluster):
    from proctor.sandbox.fleet import RaySandbox

    sb = RaySandbox(address=cluster["cluster"].address)
    try:
        yield sb
    finally:
        sb.close()


def test_config_selects_the_fleet(cluster, fleet):
    from proctor.envs.code.verifier import make_sandbox
    from proctor.sandbox.fleet import RaySandbox

    other = make_sandbox({"backend": "ray", "address": cluster["cluster"].address})
    try:
        assert isinstance(other, RaySandbox)
        assert len(fleet._ray.get(fleet._router.info.remote()).hosts) == 2
        assert other.slots == fleet.slots == 2   # one budget: the same router, not a pool per client
        engines = {h.info.engine for h in other.health().hosts}
        assert engines == {"unix:///var/run/docker.sock", cluster["engine"].url}
    finally:
        other.close()
    assert fleet.health().slots == 2   # the other client's close left the shared fleet running


def test_order_verdicts_and_both_nodes(fleet, cluster):
    # Early jobs sleep longer, so later ones finish first: order must come from the client.
    jobs = [job(i, 0.4 if i < 4 else 0.0) for i in range(40)]
    before = fleet.traffic()
    results = fleet.run_many(jobs)
    assert len(results) == 40
    check(results)
    moved = {k: v - before.get(k, 0) for k, v in fleet.traffic().items()}
    assert moved["jobs"] == moved["results"] == 40, moved   # every job went to a node and came back once
    assert moved.get("node exchange", 0) + moved.get("node submit", 0) < 40, moved   # jobs travel in batches
    hosts = {r.host for r in results}
    assert hosts == {"unix:///var/run/docker.sock", cluster["engine"].url}, hosts
    again = fleet.run_many(jobs)   # the fleet's verdict cache: none runs twice
    check(again)
    assert all(r.cached for r in again)
    assert fleet.cache_stats()["saved"] >= 40


def test_imap_back_pressure(fleet):
    read = []

    def source():
        for i in range(100, 124):
            read.append(i)
            yield job(i)

    yielded = 0
    for r in fleet.imap(source(), max_pending=3):
        assert len(read) - yielded <= 3, (len(read), yielded)   # never more than 3 read ahead of the consumer
        check([r], first=100 + yielded)
        yielded += 1
    assert yielded == 24


def test_two_clients_share_one_budget(fleet, cluster):
    """Two clients (two ranks) at once: never more jobs running than the fleet's 2 slots."""
    from proctor.sandbox.fleet import RaySandbox

    other = RaySandbox(address=cluster["cluster"].address)
    spans = []
    code = "import time\nt0 = time.time()\ntime.sleep(0.25)\nprint('span', t0, time.time())\n"
    try:
        def run(sb, salt):
            rs = sb.run_many([Job(language="python", code=code + f"# {salt} {k}\n") for k in range(6)])
            assert all(r.status == "passed" for r in rs), [r.error for r in rs]
            spans.extend(tuple(float(x) for x in r.stdout.split()[1:3]) for r in rs)

        threads = [threading.Thread(target=run, args=(sb, s)) for sb, s in ((fleet, "a"), (other, "b"))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
    finally:
        other.close()
    assert len(spans) == 12
    edges = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans])
    running = peak = 0
    for _, step in edges:
        running += step
        peak = max(peak, running)
    assert peak <= 2, f"{peak} jobs ran at once on a fleet of 2 slots"


def test_session_on_a_node(fleet):
    with fleet.session() as s:
        assert s.run("x = 41").status == "ok"
        assert s.run("x + 1").value == "42"


@pytest.mark.slow
def test_the_service_runs_on_the_fleet(fleet, cluster, tmp_path):
    """``proctor sandbox serve --ray-address``: /run_code, /v1/jobs, sessions and /health go to the
    fleet's nodes; the service shares the fleet (and its budget) with the other clients."""
    import json as json_

    from service_server import ServiceProcess

    service = ServiceProcess(tmp_path, "--ray-address", cluster["cluster"].address)
    try:
        with service.client() as c:
            health = c.get("/health").json()
            assert health["status"] == "ok" and health["slots"] == 2, health
            assert len(health["hosts"]) == 2 and all(h["up"] for h in health["hosts"].values()), health["hosts"]
            assert all(v["python"]["present"] for v in health["images"].values()), health["images"]
            r = c.post("/run_code", json={"language": "python", "code": "print(6 * 7)"}).json()
            assert r["status"] == "Success" and r["run_result"]["stdout"] == "42\n", r
            docs = [{"language": "python", "code": f"print('job {i}')\n", "tests": f"assert {i} % 3 != 0\n"}
                    for i in range(500, 520)]
            lines = [json_.loads(x) for x in c.post("/v1/jobs", json={"jobs": docs}).text.splitlines() if x.strip()]
            results = [x for x in lines if "result" in x]
            assert [x["index"] for x in results] == list(range(20))
            for i, x in enumerate(results, 500):
                assert x["result"]["status"] == truth(i) and f"job {i}\n" in x["result"]["stdout"], x
            assert {x["result"]["host"] for x in results} == {"unix:///var/run/docker.sock", cluster["engine"].url}
            sid = c.post("/v1/sessions", json={}).json()["id"]
            assert c.post(f"/v1/sessions/{sid}/run", json={"code": "x = 41"}).json()["status"] == "ok"
            assert c.post(f"/v1/sessions/{sid}/run", json={"code": "x + 1"}).json()["value"] == "42"
            assert c.get(f"/v1/sessions/{sid}").json()["calls"] == 2
            assert c.delete(f"/v1/sessions/{sid}").status_code == 204
            assert "proctor_sandbox_pool_slots 2.0" in c.get("/metrics").text
    finally:
        service.stop()
    check(fleet.run_many([job(i) for i in range(520, 524)]), first=520)   # the other client's fleet lives on


def one_grpo_step(sandbox, tmp_path):
    """One GRPO step of the code env (programs judged in ``sandbox``) from the untrained tiny model."""
    torch = pytest.importorskip("torch")
    from accelerate.state import AcceleratorState
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from proctor.envs import EnvSuite, ListSource, Task, VerifiableEnv
    from proctor.envs.code.verifier import CodeVerifier
    from proctor.tiny_model import tiny_model_path
    from proctor.trainer.config import GRPOConfig
    from proctor.trainer.grpo import GRPOTrainer

    AcceleratorState._reset_state(reset_partial_state=True)
    torch.set_num_threads(1)
    path = tiny_model_path(pretrain_steps=0)
    # The completion is the program (one token: a digit or blank runs, most tokens do not), so
    # seed 2's groups are a mix of passes and failures, every one a sandbox verdict.
    tasks = [Task(id=f"c{i}", prompt=[{"role": "user", "content": f"What is {i} + 1?"}], answer=str(i + 1),
                  data={"tests": "pass\n"}) for i in range(12)]
    env = VerifiableEnv(ListSource(tasks), CodeVerifier(sandbox=sandbox, fallback="whole"))
    config = GRPOConfig.from_flat(model=str(path), prompts_per_step=4, group_size=8, max_new_tokens=1,
                                  max_steps=1, learning_rate=1e-3, micro_batch_size=32, seed=2,
                                  output_dir=str(tmp_path))
    trainer = GRPOTrainer(config, EnvSuite({"code": env}), AutoModelForCausalLM.from_pretrained(path),
                          AutoTokenizer.from_pretrained(path))
    row = trainer.train()[-1]
    return row, {n: p.detach().clone() for n, p in trainer.model.named_parameters()}


def test_grpo_step_on_the_fleet_equals_the_local_step(fleet, tmp_path):
    """The same GRPO step of the code env, judged by the two-node fleet and by a local Sandbox:
    the same verdicts, rewards, loss and updated weights, bit for bit."""
    torch = pytest.importorskip("torch")
    from proctor.sandbox import Sandbox

    on_fleet, weights_fleet = one_grpo_step(fleet, tmp_path / "fleet")
    with Sandbox(slots=2) as local:
        on_local, weights_local = one_grpo_step(local, tmp_path / "local")
    assert on_fleet["zero_signal_frac"] < 1.0 and on_fleet["reward_mean"] > 0   # the step learned something
    assert on_fleet.get("infra_dropped", 0) == 0 and on_local.get("infra_dropped", 0) == 0
    for key in ("reward_mean", "reward_std", "zero_signal_frac", "loss", "grad_norm", "env_code_reward"):
        assert on_fleet[key] == on_local[key], (key, on_fleet[key], on_local[key])
    assert weights_fleet.keys() == weights_local.keys()
    for name, tensor in weights_fleet.items():
        assert torch.equal(tensor, weights_local[name]), name


@pytest.mark.slow
def test_node_lost_mid_batch(fleet, cluster):
    """Node B is killed after 8 results of 48: each job gets its right verdict or infra_error, in order."""
    c, engine = cluster["cluster"], cluster["engine"]
    pool_b = next(h.info.pool for h in fleet.health().hosts if h.info.engine == engine.url)
    assert ray.get(fleet._router.node.remote()) == cluster["cluster"].head_node.node_id   # not on a node we kill
    killer: list[threading.Thread] = []

    def progress(done, _total):
        if done == 8 and not killer:
            killer.append(threading.Thread(target=c.remove_node, args=(cluster["b"], False)))
            killer[0].start()

    results = fleet.run_many([job(i, 0.3) for i in range(48)], progress)
    killer[0].join(60)
    assert len(results) == 48
    infra = check(results, allow_infra=True)
    errors = sorted({r.error[:300] for r in results if r.infra_error})
    assert infra <= 4, f"{infra} infra errors: in-flight jobs of the lost node should run on node A: {errors}"
    after_loss = [r for r in results[16:] if r.status != "infra_error"]
    assert after_loss and all(r.host == "unix:///var/run/docker.sock" for r in after_loss)
    lost = [h for h in fleet.health().hosts if not h.up]
    assert len(lost) == 1 and lost[0].info.engine == engine.url
    check(fleet.run_many([job(i) for i in range(200, 210)]), first=200)   # the fleet goes on with node A
    # Nothing of node B's host process runs any more: its containers are idle (no job process in them).
    client = engine.client()
    for c_ in client.api.containers(filters={"label": f"proctor.pool={pool_b}"}):
        top = client.api.top(c_["Id"])
        assert len(top["Processes"]) <= 1, top   # only the fork server, which serves no one now
    client.close()


def test_close_leaves_nothing(fleet, cluster):
    """The last client's close removes the fleet's containers and ends its router and host actors."""
    hosts = [h for h in fleet.health().hosts if h.up]
    check(fleet.run_many([job(i) for i in range(300, 304)]), first=300)
    fleet.close()
    local = cluster["local"]
    for host in hosts:
        if host.info.engine == "unix:///var/run/docker.sock":
            assert local.api.containers(all=True, filters={"label": f"proctor.pool={host.info.pool}"}) == []
    with pytest.raises(ValueError):
        ray.get_actor(fleet.name, namespace=fleet.namespace)
    deadline = time.monotonic() + 30   # host actors hold one `sandbox` unit each until they end
    while ray.available_resources().get("sandbox", 0) < ray.cluster_resources().get("sandbox", 0):
        assert time.monotonic() < deadline, (ray.available_resources(), ray.cluster_resources())
        time.sleep(0.2)


@pytest.mark.slow
def test_wrong_token_is_refused(cluster):
    probe = ("import ray, sys\ntry:\n    ray.init(address=sys.argv[1])\n    print('CONNECTED')\n"
             "except Exception as e:\n    print('REFUSED', type(e).__name__)\n")
    env = {k: v for k, v in os.environ.items() if k not in AUTH and k != "RAY_ADDRESS"}
    env.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=secrets.token_hex(16))
    out = subprocess.run([sys.executable, "-c", probe, cluster["cluster"].address], env=env,
                         capture_output=True, text=True, timeout=180).stdout
    assert "REFUSED" in out and "CONNECTED" not in out, out


@pytest.mark.slow
def test_hung_node_is_lost_and_its_jobs_rerouted(cluster):
    """A host that stops answering (SIGSTOP: alive, silent) is lost after the take's grace; the
    jobs it held run on the other node, each with its right verdict, in order.

    Runs last: node B is gone by now, so a node C on the second engine joins for this fleet."""
    import signal

    from proctor.sandbox.fleet import RaySandbox
    from proctor.sandbox.fleet.router import TAKE_GRACE_S, TAKE_WAIT_S

    c, engine = cluster["cluster"], cluster["engine"]
    node_c = c.add_node(num_cpus=1, resources={"sandbox": 1}, env_vars={"DOCKER_HOST": engine.url})
    sb = RaySandbox(address=c.address, name="hang-test")
    stopped = None
    try:
        handles = ray.get(sb._router.__ray_call__.remote(lambda router: [(h.handle, h.info) for h in router.hosts]))
        handle, info = next((h, i) for h, i in handles if i.node_id == node_c.node_id)
        stopped = ray.get(handle.__ray_call__.remote(lambda host: os.getpid()))
        os.kill(stopped, signal.SIGSTOP)
        t0 = time.monotonic()
        results = sb.run_many([job(i) for i in range(400, 424)])
        check(results, first=400)   # every job: its right verdict, none infra_error
        assert all(r.host == "unix:///var/run/docker.sock" for r in results), [r.host for r in results]
        assert time.monotonic() - t0 >= TAKE_WAIT_S + TAKE_GRACE_S - 5   # C held jobs until it was judged hung
        lost = [h for h in sb.health().hosts if not h.up]
        assert [h.info.node_id for h in lost] == [info.node_id], sb.health()
        assert "did not answer" in lost[0].cause, lost[0].cause
    finally:
        if stopped is not None:
            try:
                os.kill(stopped, signal.SIGCONT)   # the router's kill ends it either way
            except ProcessLookupError:
                pass
        sb.close()
        c.remove_node(node_c)
