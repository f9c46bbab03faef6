#!/usr/bin/env bash
# Set up SandboxFusion (bytedance/SandboxFusion) from its source, outside this repository, so
# that bench/sandbox_service.py can time its /run_code beside Proctor's service.
#
#   bash bench/sandboxfusion_setup.sh [SOURCE] [--start]
#
# SOURCE: a SandboxFusion work tree or a git directory of it (default: the mirror at
# /work/.mirror/bytedance+SandboxFusion/repo). Everything goes under $SF_HOME
# (default /work/sandboxfusion): src/ (the source at the mirror's HEAD, via git archive),
# .venv/ (the server's Python), envs/sandbox-runtime/ (the Python that runs submitted code).
# Idempotent: each step is skipped when its result is already there. --start then runs the
# server in the foreground on 127.0.0.1:$SF_PORT (default 8080), exactly as its Makefile's
# `make run` does (one uvicorn process).
#
# What differs from SandboxFusion's own deployment (its Docker image, scripts/Dockerfile.server)
# and why; its own code and config files are not modified:
# * Config: its default, sandbox/configs/local.yaml (SANDBOX_CONFIG unset, as in its image):
#   `isolation: none`, i.e. each job is a plain subprocess on the host (bash -c "python
#   FILE" / g++ then ./test), with an address-space rlimit when memory_limit_MB > 0 and the
#   process tree killed at run_timeout. Its other mode, `isolation: lite`, mounts an overlay
#   of the host's / and uses cgroup v1 cgexec and ip netns under sudo; it is not its
#   image's default and would remount the root of a machine shared with other work, so it
#   is not used.
# * The runtime Python: its Python runner asks conda for an env named `sandbox-runtime`
#   (`source $CONDA_ROOT/bin/activate sandbox-runtime && which python`, with the conda root
#   found by walking up from the server's interpreter to a directory holding `condabin/`).
#   Conda's channels are not reachable from this machine, so $SF_HOME is made to look like a
#   conda root: an empty condabin/ and a bin/activate that activates the venv
#   envs/<name>/ (a python3 venv). Its image uses conda's Python 3.10 with
#   runtime/python/requirements.txt (numpy, pandas, torch, ...); the bench's programs use
#   only the standard library, so the runtime venv is bare unless SF_RUNTIME_REQS=1.
#   The interpreter is the host's python3 (3.11 here).
# * Dependencies: the versions pinned in its poetry.lock (main group), exported with
#   poetry and installed with pip into .venv (its image uses `poetry install` into conda).
# * docs/build: its server mounts the built documentation site as static files and refuses
#   to start without the directory; the site (an npm/docusaurus build) is not needed to
#   serve /run_code, so an empty directory stands in for it.
# * C++: its runner calls the host's g++ (-std=c++17, plus -lcrypto/-lssl/-lpthread where
#   they link); g++ is installed with apt when absent.
set -euo pipefail

SF_HOME=${SF_HOME:-/work/sandboxfusion}
SF_PORT=${SF_PORT:-8080}
MIRROR=/work/.mirror/bytedance+SandboxFusion/repo
SOURCE=$MIRROR
START=0
for arg in "$@"; do
    case "$arg" in
        --start) START=1 ;;
        -*) echo "unknown option $arg (usage: $0 [SOURCE] [--start])" >&2; exit 2 ;;
        *) SOURCE=$arg ;;
    esac
done

say() { echo "[sandboxfusion_setup] $*"; }

# 1. The source, outside the project.
mkdir -p "$SF_HOME"
if [ ! -f "$SF_HOME/src/sandbox/server/server.py" ]; then
    rm -rf "$SF_HOME/src.partial"
    mkdir -p "$SF_HOME/src.partial"
    if [ -f "$SOURCE/sandbox/server/server.py" ]; then
        say "copying the work tree $SOURCE"
        cp -a "$SOURCE/." "$SF_HOME/src.partial/"
    elif git -C "$SOURCE" rev-parse --git-dir >/dev/null 2>&1; then
        say "extracting HEAD of $SOURCE ($(git -C "$SOURCE" rev-parse --short HEAD))"
        git -C "$SOURCE" rev-parse HEAD > "$SF_HOME/src.partial/.source_commit"
        git -C "$SOURCE" archive HEAD | tar -x -C "$SF_HOME/src.partial"
    else
        echo "SOURCE $SOURCE is neither a SandboxFusion work tree nor a git directory:" \
             "pass the path of one (default $MIRROR)" >&2
        exit 1
    fi
    mv "$SF_HOME/src.partial" "$SF_HOME/src"
fi
SRC=$SF_HOME/src

# 2. Host tools: python3 with venv, g++.
if ! command -v g++ >/dev/null || ! python3 -c 'import venv, ensurepip' 2>/dev/null; then
    say "installing g++ and python3-venv with apt"
    apt-get update -qq && apt-get install -y -qq g++ python3-venv
fi
python3 -c 'import sys; assert sys.version_info >= (3, 11), "SandboxFusion needs Python >= 3.11"'

# 3. The server's venv, with poetry.lock's versions.
if [ ! -f "$SF_HOME/.venv/.deps_done" ]; then
    say "creating $SF_HOME/.venv and installing SandboxFusion's locked dependencies"
    python3 -m venv "$SF_HOME/.venv"
    python3 -m venv "$SF_HOME/.poetry"
    "$SF_HOME/.poetry/bin/pip" install -q poetry poetry-plugin-export
    (cd "$SRC" && "$SF_HOME/.poetry/bin/poetry" export -f requirements.txt --without-hashes \
        --only main -o "$SF_HOME/requirements.lock.txt")
    "$SF_HOME/.venv/bin/pip" install -q --upgrade pip
    "$SF_HOME/.venv/bin/pip" install -q -r "$SF_HOME/requirements.lock.txt"
    touch "$SF_HOME/.venv/.deps_done"
fi

# 4. A conda-shaped root for the runner's `sandbox-runtime` env (see the header).
mkdir -p "$SF_HOME/condabin" "$SF_HOME/bin" "$SF_HOME/envs"
cat > "$SF_HOME/bin/activate" <<'EOF'
# Stand-in for conda's activate (bench/sandboxfusion_setup.sh): `source activate NAME`
# activates the venv $SF_HOME/envs/NAME.
_sf_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
source "$_sf_root/envs/${1:?usage: source activate ENV}/bin/activate"
EOF
if [ ! -x "$SF_HOME/envs/sandbox-runtime/bin/python" ]; then
    say "creating the runtime env $SF_HOME/envs/sandbox-runtime"
    python3 -m venv "$SF_HOME/envs/sandbox-runtime"
    if [ "${SF_RUNTIME_REQS:-0}" = 1 ]; then
        "$SF_HOME/envs/sandbox-runtime/bin/pip" install -q -r "$SRC/runtime/python/requirements.txt" \
            --ignore-requires-python
    fi
fi

# 5. The documentation mount point the server checks for at start.
mkdir -p "$SRC/docs/build"

# 6. Check: the server imports, and the runner finds its Python.
(cd "$SRC" && "$SF_HOME/.venv/bin/python" - <<'EOF'
from sandbox.runners.major import get_python_rt_env
from sandbox.server.server import app  # noqa: F401 (the import is the check)
path = get_python_rt_env('sandbox-runtime')['PATH'].split(':')[0]
print(f'[sandboxfusion_setup] ready: runtime python in {path}')
EOF
)

if [ "$START" = 1 ]; then
    say "starting on 127.0.0.1:$SF_PORT"
    cd "$SRC"
    exec "$SF_HOME/.venv/bin/uvicorn" sandbox.server.server:app --host 127.0.0.1 --port "$SF_PORT"
fi
say "start it with: cd $SRC && $SF_HOME/.venv/bin/uvicorn sandbox.server.server:app --host 127.0.0.1 --port $SF_PORT"
