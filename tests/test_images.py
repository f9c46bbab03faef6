"""Sandbox images: input hashing (no engine) and real builds against the local Docker engine."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from proctor.sandbox import images as img
from proctor.sandbox.engine import connect
from proctor.sandbox.errors import EngineUnavailable, SandboxError


@pytest.fixture(scope="module")
def client():
    try:
        return connect()
    except EngineUnavailable as exc:
        pytest.skip(str(exc))


@pytest.fixture(scope="module")
def built(client) -> dict[str, str]:
    return dict(zip(img.IMAGE_NAMES, img.build_images(client)))


def _tmp_images(tmp_path: Path) -> Path:
    dst = tmp_path / "images"
    shutil.copytree(img.default_images_dir(), dst, ignore=shutil.ignore_patterns("__pycache__"))
    return dst


# ---------------------------------------------------------------- hashing, no engine


def test_image_ref_is_stable_and_shaped() -> None:
    for name in img.IMAGE_NAMES:
        ref = img.image_ref(name)
        assert ref == img.image_ref(name)
        repo, tag = ref.split(":")
        assert repo == f"proctor/{name}" and len(tag) == 12
    assert img.image_ref("python") != img.image_ref("cpp")
    assert set(img.LANGUAGE_IMAGE.values()) <= set(img.IMAGE_NAMES)


def test_copy_of_images_dir_hashes_like_the_original(tmp_path: Path) -> None:
    copy = _tmp_images(tmp_path)
    for name in img.IMAGE_NAMES:
        assert img.input_hash(name, images_dir=copy) == img.input_hash(name)


def test_changed_dockerfile_changes_only_its_ref(tmp_path: Path) -> None:
    copy = _tmp_images(tmp_path)
    before = {n: img.input_hash(n, images_dir=copy) for n in img.IMAGE_NAMES}
    dockerfile = copy / "python" / "Dockerfile"
    dockerfile.write_bytes(dockerfile.read_bytes() + b"\n# one more byte\n")
    assert img.input_hash("python", images_dir=copy) != before["python"]
    assert img.input_hash("cpp", images_dir=copy) == before["cpp"]


def test_changed_server_file_changes_every_ref(tmp_path: Path) -> None:
    server = tmp_path / "server"
    shutil.copytree(img.default_server_dir(), server, ignore=shutil.ignore_patterns("__pycache__"))
    before = {n: img.input_hash(n, server_dir=server) for n in img.IMAGE_NAMES}
    (server / "extra.py").write_text("X = 1\n")
    (server / "notes.txt").write_text("not part of the context\n")
    ctx = img.context_files("python", server_dir=server)
    assert "proctor-server/extra.py" in ctx and "proctor-server/notes.txt" not in ctx
    for name in img.IMAGE_NAMES:
        assert img.input_hash(name, server_dir=server) != before[name]


def test_base_ref_changes_with_sources(tmp_path: Path) -> None:
    src = tmp_path / "debian.sources"
    src.write_text("Types: deb\nURIs: http://deb.debian.org/debian\nSuites: bookworm\nComponents: main\n")
    first = img.base_recipe((src,))
    src.write_text(src.read_text() + "# edited\n")
    assert img.base_recipe((src,)).ref != first.ref
    fallback = img.base_recipe((tmp_path / "absent",))
    assert img.DEBIAN_MIRROR in fallback.command
    assert first.ref.startswith("proctor/base:bookworm-")


def test_base_ref_feeds_the_image_hash() -> None:
    assert img.input_hash("python", base="proctor/base:a") != img.input_hash("python", base="proctor/base:b")


def test_unknown_image_name_is_rejected() -> None:
    with pytest.raises(ValueError, match="choose one of"):
        img.image_ref("cobol")


def test_unreachable_engine_says_how_to_fix() -> None:
    with pytest.raises(EngineUnavailable) as info:
        connect("unix:///nonexistent/proctor-docker.sock")
    assert isinstance(info.value, SandboxError)
    assert "/nonexistent/proctor-docker.sock" in str(info.value) and "scripts/setup.sh" in str(info.value)


# ---------------------------------------------------------------- real engine


@pytest.mark.docker
def test_build_is_idempotent(client, built: dict[str, str]) -> None:
    ids_before = {i.id for i in client.images.list(all=True)}
    lines: list[str] = []
    second = img.ensure_images(client, progress=lines.append)
    assert [b.ref for b in second] == [built[n] for n in img.IMAGE_NAMES]
    assert not any(b.built for b in second), "unchanged inputs must not rebuild"
    assert lines == []
    assert {i.id for i in client.images.list(all=True)} == ids_before
    for b in second:
        assert client.images.get(b.ref).labels[img.INPUTS_LABEL].startswith(b.ref.split(":")[1])


@pytest.mark.docker
def test_status_reports_built_images(client, built: dict[str, str]) -> None:
    status = {s.name: s for s in img.image_status(client)}
    assert set(status) == set(img.IMAGE_NAMES)
    for name, ref in built.items():
        assert status[name].present and status[name].ref == ref
        assert ref not in status[name].stale_tags
    assert img.require_image(client, "cpp") == built["cpp"]


def _run(client, ref: str, *argv: str) -> str:
    out = client.containers.run(ref, entrypoint=list(argv), remove=True, network_mode="none")
    return out.decode()


@pytest.mark.docker
def test_python_image_runs_as_uid_1000_with_python3(client, built: dict[str, str]) -> None:
    ref = built["python"]
    assert _run(client, ref, "id", "-u").strip() == "1000"
    assert _run(client, ref, "id", "-g").strip() == "1000"
    assert _run(client, ref, "python3", "-c", "print(6 * 7)").strip() == "42"
    # /work is a symlink into /job, the tmpfs where the server makes each job's directories.
    assert _run(client, ref, "readlink", "/work").strip() == "/job/work"
    assert "forkserver.py" in _run(client, ref, "ls", "/opt/proctor")
    assert _run(client, ref, "id", "-u", "judge").strip() == "1001"   # the Python/JavaScript tests' user


@pytest.mark.docker
def test_cpp_image_has_compilers(client, built: dict[str, str]) -> None:
    ref = built["cpp"]
    assert _run(client, ref, "id", "-u").strip() == "1000"
    assert "gcc" in _run(client, ref, "gcc", "--version")
    assert "g++" in _run(client, ref, "g++", "--version")
    program = 'int main(){return 0;}'
    assert _run(client, ref, "sh", "-c",
                f"cd /tmp && echo '{program}' > t.cc && g++ -o t t.cc && ./t && echo ok").strip() == "ok"
