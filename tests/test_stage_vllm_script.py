"""scripts/gpu/stage_vllm_h200.sh's decisions on a small fake bundle, call by call, as on the GPU machine:
a partial stage waits, a truncated part or a missing one is refused with the reason, and parts of
two bundles never mix. (The install itself needs the H200 image; it is not run here.)"""
from __future__ import annotations

import hashlib
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "gpu" / "stage_vllm_h200.sh"


def make_parts(tmp: Path, payload: bytes, n: int, name: str = "bundle") -> tuple[list[Path], str]:
    """Split ``payload`` into n part folders like vllm_bundle.sh does: pNN/part.NN + MANIFEST."""
    sha = hashlib.sha256(payload).hexdigest()
    size = -(-len(payload) // n)
    folders = []
    for i in range(n):
        d = tmp / name / f"p{i:02d}"
        d.mkdir(parents=True)
        (d / f"part.{i:02d}").write_bytes(payload[i * size:(i + 1) * size])
        (d / "MANIFEST").write_text(f"parts {n}\nsha256 {sha}\n")
        folders.append(d)
    return folders, sha


def call(tree: Path, root: Path, carried: Path | None) -> subprocess.CompletedProcess:
    """One device call: the tree carries at most one part folder; /tmp is the ``root`` that survives."""
    stage = tree / ".stage" / "vllm"
    shutil.rmtree(stage, ignore_errors=True)
    stage.mkdir(parents=True)
    if carried is not None:
        shutil.copytree(carried, stage / carried.name)
    cmd = f'source "{SCRIPT}"; echo "rc=$? staged=$VLLM_STAGED"'
    return subprocess.run(["bash", "-c", cmd], cwd=tree, capture_output=True, text=True, timeout=60,
                          env={"PATH": "/usr/bin:/bin", "VLLM_STAGE_ROOT": str(root), "HOME": str(tree)})


@pytest.fixture
def dirs(tmp_path):
    if shutil.which("bash") is None or shutil.which("sha256sum") is None:
        pytest.skip("needs bash and coreutils")
    tree, root = tmp_path / "tree", tmp_path / "root"
    tree.mkdir()
    root.mkdir()
    return tmp_path, tree, root


def test_a_partial_stage_waits_for_the_next_part(dirs):
    tmp, tree, root = dirs
    parts, sha = make_parts(tmp, b"x" * 1000, 3)
    for i, part in enumerate(parts[:2]):
        out = call(tree, root, part)
        assert "rc=0 staged=0" in out.stdout, out.stderr
        assert f"{i + 1} of 3 parts of bundle {sha[:12]}" in out.stderr
    assert sorted(p.name for p in (root / "vparts" / sha).iterdir()) == ["MANIFEST", "part.00", "part.01"]


def test_no_part_and_nothing_installed_is_an_error_that_says_what_to_carry(dirs):
    _, tree, root = dirs
    out = call(tree, root, None)
    assert "rc=2 staged=0" in out.stdout
    assert "carry .stage/vllm/p00 first" in out.stderr


def test_a_truncated_part_is_refused_and_nothing_is_marked_installed(dirs):
    tmp, tree, root = dirs
    parts, sha = make_parts(tmp, bytes(range(256)) * 8, 2)
    (parts[1] / "part.01").write_bytes((parts[1] / "part.01").read_bytes()[:-5])
    call(tree, root, parts[0])
    out = call(tree, root, parts[1])
    assert "rc=2 staged=0" in out.stdout
    assert f"expected {sha}: a part is truncated" in out.stderr
    assert not (root / "vstage" / ".done").exists()


def test_parts_of_two_bundles_never_join(dirs):
    tmp, tree, root = dirs
    old, old_sha = make_parts(tmp, b"old" * 400, 3, "old")
    new, new_sha = make_parts(tmp, b"new" * 400, 2, "new")
    call(tree, root, old[0])
    call(tree, root, old[1])  # an older bundle's parts wait in /tmp
    out = call(tree, root, new[0])
    assert f"1 of 2 parts of bundle {new_sha[:12]}" in out.stderr  # not 3 of ...: the old parts do not count
    assert sorted(p.name for p in (root / "vparts" / new_sha).iterdir()) == ["MANIFEST", "part.00"]
    assert (root / "vparts" / old_sha / "part.01").exists()
