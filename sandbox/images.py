"""Building the sandbox images without a container registry.

The base is a Debian bookworm minbase made by mmdebstrap from the machine's own apt
sources and imported into the engine; each sandbox image is built FROM it with a
Dockerfile from ``proctor.images`` plus the fork-server files of
``proctor.sandbox.server``. Every tag is a hash of its inputs, so an unchanged input
set costs one tag lookup and any edit to a Dockerfile or server file yields a new tag.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import io
import os
import shutil
import subprocess
import tarfile
import tempfile
from collections import deque
from dataclasses import dataclass, field
from importlib.resources import files
from pathlib import Path
from typing import Callable, Iterator

import docker

from .errors import ImageBuildError, InfraError

IMAGE_NAMES: tuple[str, ...] = ("python", "cpp", "java", "go", "rust", "node")
LANGUAGE_IMAGE: dict[str, str] = {"python": "python", "c": "cpp", "cpp": "cpp", "java": "java", "go": "go",
                                  "rust": "rust", "javascript": "node"}

REPO_PREFIX = "proctor/"
BASE_REPO = "proctor/base"
INPUTS_LABEL = "proctor.inputs"
SERVER_DIR_IN_CONTEXT = "proctor-server"
SERVER_PATTERNS = ("*.py", "*.c")
SHARED_PATTERN = "*.sh"

DEBIAN_SUITE = "bookworm"
DEBIAN_MIRROR = "http://deb.debian.org/debian"
SOURCES_CANDIDATES = (Path("/etc/apt/sources.list.d/debian.sources"), Path("/etc/apt/sources.list"))
# Stands in for the per-run temp path so the base hash only changes with the recipe.
_OUT_PLACEHOLDER = "<out>/base.tar"
_LOG_TAIL = 40

Progress = Callable[[str], None]


@dataclass(frozen=True)
class BaseRecipe:
    """How the Debian base is made; `ref` hashes exactly what changes its content."""

    command: tuple[str, ...]
    sources_text: str

    @property
    def ref(self) -> str:
        h = hashlib.sha256()
        for part in (*self.command, self.sources_text):
            _feed(h, part.encode())
        return f"{BASE_REPO}:{DEBIAN_SUITE}-{h.hexdigest()[:12]}"

    def argv(self, out: Path) -> list[str]:
        return [str(out) if a == _OUT_PLACEHOLDER else a for a in self.command]


@dataclass
class ImageStatus:
    name: str
    ref: str
    present: bool
    stale_tags: list[str] = field(default_factory=list)


@dataclass
class ImageBuild:
    """Outcome of ensuring one image: `built` is False when the tag already existed."""

    name: str
    ref: str
    built: bool
    image_id: str


# ---------------------------------------------------------------- input hashing


def _feed(h: "hashlib._Hash", data: bytes) -> None:
    # Length prefix: without it ("ab", "c") and ("a", "bc") would hash alike.
    h.update(len(data).to_bytes(8, "big"))
    h.update(data)


def base_recipe(sources_candidates: tuple[Path, ...] = SOURCES_CANDIDATES) -> BaseRecipe:
    """The mmdebstrap command for the base, using the machine's apt sources when it has them."""
    for path in sources_candidates:
        if path.is_file():
            mirror, text = str(path), path.read_text()
            break
    else:
        mirror, text = DEBIAN_MIRROR, ""
    command = ("mmdebstrap", "--variant=minbase", "--format=tar", DEBIAN_SUITE, _OUT_PLACEHOLDER, mirror)
    return BaseRecipe(command=command, sources_text=text)


def base_ref() -> str:
    """Tag of the base image the current recipe makes (no docker call)."""
    return base_recipe().ref


def default_images_dir() -> Path:
    return Path(str(files("proctor.images")))


def default_server_dir() -> Path:
    return Path(str(files("proctor.sandbox.server")))


def _check_name(name: str) -> None:
    if name not in IMAGE_NAMES:
        raise ValueError(f"unknown image {name!r}; choose one of {', '.join(IMAGE_NAMES)}")


def context_files(name: str, images_dir: Path | None = None, server_dir: Path | None = None) -> dict[str, bytes]:
    """Build-context path -> content for image `name`: images/NAME/*, images/*.sh and the server files."""
    _check_name(name)
    image_dir = (images_dir or default_images_dir()) / name
    if not (image_dir / "Dockerfile").is_file():
        raise ImageBuildError(f"{image_dir / 'Dockerfile'} is missing; restore it from git")
    out: dict[str, bytes] = {}
    for path in sorted(image_dir.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts:
            out[path.relative_to(image_dir).as_posix()] = path.read_bytes()
    # The steps every image shares (images/*.sh): in every context, so in every tag's hash.
    for path in sorted((images_dir or default_images_dir()).glob(SHARED_PATTERN)):
        out[path.name] = path.read_bytes()
    server = server_dir or default_server_dir()
    for pattern in SERVER_PATTERNS:
        for path in sorted(server.glob(pattern)):
            if path.is_file():
                out[f"{SERVER_DIR_IN_CONTEXT}/{path.name}"] = path.read_bytes()
    return out


def input_hash(
    name: str,
    images_dir: Path | None = None,
    server_dir: Path | None = None,
    base: str | None = None,
) -> str:
    """sha256 over the Dockerfile, every context file (path + content, sorted) and the base ref."""
    return _hash_context(context_files(name, images_dir, server_dir), base or base_ref())


def _hash_context(ctx: dict[str, bytes], base: str) -> str:
    h = hashlib.sha256()
    _feed(h, ctx["Dockerfile"])
    for path in sorted(ctx):
        _feed(h, path.encode())
        _feed(h, ctx[path])
    _feed(h, base.encode())
    return h.hexdigest()


def image_ref(name: str, images_dir: Path | None = None, server_dir: Path | None = None) -> str:
    """Tag `proctor/NAME:<hash12>` that the current inputs hash to; no docker call."""
    return f"{REPO_PREFIX}{name}:{input_hash(name, images_dir, server_dir)[:12]}"


# ---------------------------------------------------------------- engine queries


def _image_id(client: docker.DockerClient, ref: str) -> str | None:
    try:
        return client.images.get(ref).id
    except docker.errors.ImageNotFound:
        return None


def _tags_of_repo(client: docker.DockerClient, repo: str) -> list[str]:
    tags: set[str] = set()
    for image in client.images.list(name=repo):
        tags.update(t for t in image.tags if t.rsplit(":", 1)[0] == repo)
    return sorted(tags)


def image_status(client: docker.DockerClient) -> list[ImageStatus]:
    """Per sandbox image: the current ref, whether it is built, and older tags of the same repo."""
    out = []
    for name in IMAGE_NAMES:
        ref = image_ref(name)
        stale = [t for t in _tags_of_repo(client, REPO_PREFIX + name) if t != ref]
        out.append(ImageStatus(name=name, ref=ref, present=_image_id(client, ref) is not None, stale_tags=stale))
    return out


def image_status_doc(client: docker.DockerClient) -> dict[str, dict]:
    """`image_status` as plain data, as /health reports it: {image name: {present, ref}}."""
    return {s.name: {"present": s.present, "ref": s.ref} for s in image_status(client)}


def stale_tags(client: docker.DockerClient) -> list[str]:
    """Every proctor/* tag (images and base) that the current inputs no longer hash to."""
    current = {base_ref(), *(image_ref(n) for n in IMAGE_NAMES)}
    repos = [BASE_REPO, *(REPO_PREFIX + n for n in IMAGE_NAMES)]
    return [t for repo in repos for t in _tags_of_repo(client, repo) if t not in current]


def prune_images(client: docker.DockerClient) -> tuple[list[str], list[str]]:
    """Untag stale proctor/* tags; returns (removed, kept because a container still uses them)."""
    removed, kept = [], []
    for tag in stale_tags(client):
        try:
            client.images.remove(tag)
            removed.append(tag)
        except docker.errors.APIError:
            kept.append(tag)
    return removed, kept


def require_image(client: docker.DockerClient, name: str) -> str:
    """The current ref of image `name`, or InfraError saying how to build it."""
    ref = image_ref(name)
    if _image_id(client, ref) is None:
        raise InfraError(f"sandbox image {ref} is not built; run `proctor images build --name {name}`")
    return ref


# ---------------------------------------------------------------- building


@contextlib.contextmanager
def _build_lock() -> Iterator[None]:
    # One engine per machine: concurrent builders (setup.sh and a test run) would both
    # run mmdebstrap and race on the same tags, so they queue here instead.
    path = Path(tempfile.gettempdir()) / "proctor-images-build.lock"
    with open(path, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _make_base(client: docker.DockerClient, progress: Progress) -> str:
    recipe = base_recipe()
    ref = recipe.ref
    if _image_id(client, ref) is not None:
        return ref
    if shutil.which("mmdebstrap") is None:
        raise ImageBuildError(
            "mmdebstrap is not installed; run `apt-get install -y mmdebstrap` (or `bash scripts/setup.sh`)"
        )
    with tempfile.TemporaryDirectory(prefix="proctor-base-") as tmp:
        tar = Path(tmp) / "base.tar"
        argv = recipe.argv(tar)
        progress(f"making base {ref}: {' '.join(argv)}")
        tail: deque[str] = deque(maxlen=_LOG_TAIL)
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        assert proc.stdout is not None
        for line in proc.stdout:
            tail.append(line.rstrip())
            progress(line.rstrip())
        if proc.wait() != 0:
            hint = "" if os.geteuid() == 0 else " (mmdebstrap needs root here; rerun as root)"
            raise ImageBuildError(
                f"mmdebstrap failed with exit code {proc.returncode}{hint}; last lines:\n" + "\n".join(tail)
            )
        progress(f"importing {tar.stat().st_size // 2**20} MiB as {ref}")
        repo, tag = ref.rsplit(":", 1)
        try:
            client.api.import_image_from_file(
                str(tar), repository=repo, tag=tag,
                changes=[f"LABEL {INPUTS_LABEL}={tag}", 'CMD ["/bin/bash"]'],
            )
        except docker.errors.APIError as exc:
            raise ImageBuildError(f"importing the base image failed: {exc}") from exc
    if _image_id(client, ref) is None:
        raise ImageBuildError(f"imported the base but {ref} is not in the engine; check `docker images`")
    return ref


def _context_tar(ctx: dict[str, bytes]) -> io.BytesIO:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for path in sorted(ctx):
            info = tarfile.TarInfo(path)
            info.size, info.mode, info.mtime = len(ctx[path]), 0o644, 0
            tar.addfile(info, io.BytesIO(ctx[path]))
    buf.seek(0)
    return buf


def _build_one(client: docker.DockerClient, name: str, base: str, progress: Progress, nocache: bool) -> ImageBuild:
    # Read the files once so the tag always matches the bytes actually sent.
    ctx = context_files(name)
    digest = _hash_context(ctx, base)
    ref = f"{REPO_PREFIX}{name}:{digest[:12]}"
    progress(f"building {ref} FROM {base}")
    tail: deque[str] = deque(maxlen=_LOG_TAIL)
    image_id = ""
    try:
        stream = client.api.build(
            fileobj=_context_tar(ctx), custom_context=True, tag=ref,
            buildargs={"BASE": base}, labels={INPUTS_LABEL: digest},
            # apt-get in the build reaches the Debian mirror only via the host network here.
            network_mode="host", rm=True, forcerm=True, nocache=nocache, pull=False, decode=True,
        )
        for chunk in stream:
            for line in str(chunk.get("stream", "")).splitlines():
                if line.strip():
                    tail.append(line)
                    progress(line)
            if "error" in chunk:
                detail = chunk.get("errorDetail", {}).get("message") or chunk["error"]
                raise ImageBuildError(f"building {ref} failed: {detail}; last lines:\n" + "\n".join(tail))
            image_id = chunk.get("aux", {}).get("ID", image_id)
    except docker.errors.APIError as exc:
        raise ImageBuildError(f"building {ref} failed: {exc}; last lines:\n" + "\n".join(tail)) from exc
    found = _image_id(client, ref)
    if found is None:
        raise ImageBuildError(f"build of {ref} ended without the tag; last lines:\n" + "\n".join(tail))
    return ImageBuild(name=name, ref=ref, built=True, image_id=image_id or found)


def ensure_images(
    client: docker.DockerClient,
    names: list[str] | tuple[str, ...] | None = None,
    progress: Progress | None = None,
    force: bool = False,
) -> list[ImageBuild]:
    """Build every named image whose current tag is missing (all of them with `force`).

    The base is made only when some image needs building and its tag is missing;
    `force` rebuilds the images without the layer cache but reuses an existing base.
    """
    say = progress or (lambda _line: None)
    wanted = list(names or IMAGE_NAMES)
    for name in wanted:
        _check_name(name)
    results: dict[str, ImageBuild] = {}
    todo = []
    for name in wanted:
        ref = image_ref(name)
        found = _image_id(client, ref)
        if found is not None and not force:
            results[name] = ImageBuild(name=name, ref=ref, built=False, image_id=found)
        else:
            todo.append(name)
    if todo:
        with _build_lock():
            base = _make_base(client, say)
            for name in todo:
                found = _image_id(client, image_ref(name))
                if found is not None and not force:  # another builder finished it while we waited
                    results[name] = ImageBuild(name=name, ref=image_ref(name), built=False, image_id=found)
                else:
                    results[name] = _build_one(client, name, base, say, nocache=force)
    return [results[n] for n in wanted]


def build_images(
    client: docker.DockerClient,
    names: list[str] | tuple[str, ...] | None = None,
    progress: Progress | None = None,
    force: bool = False,
) -> list[str]:
    """Ensure the named images (default: all) are built; returns their refs."""
    return [b.ref for b in ensure_images(client, names, progress, force)]
