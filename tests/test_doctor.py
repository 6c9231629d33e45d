"""``peagle-lab doctor`` on the CPU: the report, its JSON, and a non-zero exit naming what is missing."""
import functools
import json
from pathlib import Path

import pytest
import torch

from peagle_lab import cli, doctor, zoo
from peagle_lab.kernels.decode_attention import multi_query_attention


@pytest.fixture(scope="module")
def report():
    return doctor.report(build=False)


def test_the_json_report_says_what_this_cpu_machine_will_do(report, capsys):
    assert cli.main(["doctor", "--json", "--no-build"]) == (1 if report["problems"] else 0)
    got = json.loads(capsys.readouterr().out)
    assert got["versions"]["torch"] == torch.__version__
    assert got["gpus"] == []  # no CUDA here
    # The engine's own decisions on a CPU: no compile, no graphs, SDPA, the PyTorch references; the test
    # process runs Triton's interpreter (conftest), which the report says.
    assert got["engine"] == {"device": "cpu", "compile": False, "cuda_graphs": False, "decode_attention": "SDPA",
                             "kernel_backend": "torch", "triton_interpreter": True}
    assert {h["method"] for h in got["heads"]} == {"eagle3", "peagle"}
    assert set(got["vllm"]) == {"importable", "version"}


def test_the_model_cache_keys_match_the_committed_gpu_reports(report):
    """``doctor --json`` outputs committed from GPU machines keep their meaning: the same keys,
    model_cache's included."""
    committed = sorted(Path(__file__).parents[1].glob("docs/results/*/doctor/*/doctor.json"))
    assert committed, "no committed doctor.json under docs/results/<device>/doctor/"
    for path in committed:
        got = json.loads(path.read_text())
        assert list(got) == list(report) and list(got["model_cache"]) == list(report["model_cache"]), path
    assert report["model_cache"] == zoo.model_cache_status()  # doctor reads the cache through zoo's public call


def test_the_shipped_heads_pass_their_checksums(report):
    for head in report["heads"]:
        assert head["checksums_ok"] and len(head["digest"]) == 16, head


def test_the_text_report_names_each_part(report):
    text = doctor.render(report)
    assert "torch " + torch.__version__ in text and "no CUDA GPU" in text
    assert "engine on cpu: torch.compile off, CUDA graphs off, attention SDPA" in text
    assert "head peagle: digest" in text


def test_a_missing_model_cache_exits_1_and_says_to_fetch(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PEAGLE_LAB_CACHE", str(tmp_path))
    assert cli.main(["doctor", "--no-build"]) == 1
    out = capsys.readouterr().out
    assert f"problem: the embedded SmolLM2-135M-Instruct is not in {tmp_path}" in out
    assert "run `peagle-lab fetch`" in out


def test_a_corrupt_head_is_a_problem(tmp_path, monkeypatch):
    from safetensors.torch import save_file

    import peagle_lab.heads

    (tmp_path / "config.json").write_text("{}")
    save_file({"w": torch.zeros(2)}, str(tmp_path / "model.safetensors"))
    (tmp_path / "checksums.json").write_text(json.dumps({"model.safetensors": "0" * 64}))
    monkeypatch.setattr(peagle_lab.heads, "bundled_head_dir", lambda method: tmp_path if method == "peagle" else None)
    heads = {h["method"]: h for h in doctor.heads()}
    assert heads["peagle"]["mismatched"] == ["model.safetensors"] and not heads["peagle"]["checksums_ok"]
    problems = doctor.problems({"model_cache": {"ready": True}, "heads": list(heads.values()), "gpus": []})
    assert any("shipped peagle head is missing or corrupt" in p for p in problems)
    assert any("shipped eagle3 head is missing" in p for p in problems)


def test_a_head_folder_without_its_weights_is_a_problem_not_a_crash(tmp_path, monkeypatch):
    import peagle_lab.heads

    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "checksums.json").write_text(json.dumps({"model.safetensors": "0" * 64}))
    monkeypatch.setattr(peagle_lab.heads, "bundled_head_dir", lambda method: tmp_path)
    for head in doctor.heads():
        assert head["digest"] is None and head["mismatched"] == ["model.safetensors"] and not head["checksums_ok"]


def test_a_gpu_whose_kernels_do_not_build_is_a_problem():
    gpu = {"index": 0, "name": "NVIDIA X", "arch": "sm_100",
           "kernels": {"built": 3, "failed": ["_k [bf16 w4 s3] on sm_100: CompilationError"],
                       "over_shared_memory": [], "spilled": [], "seconds": 1.0}}
    problems = doctor.problems({"model_cache": {"ready": True}, "heads": [], "gpus": [gpu]})
    assert problems == ["GPU 0 (NVIDIA X, sm_100): 1 kernel builds failed and 0 need more shared memory than "
                        "sm_100 has: _k [bf16 w4 s3] on sm_100: CompilationError"]


def test_an_arch_without_published_limits_is_reported_not_built():
    assert "no published limits for sm_89" in doctor.kernel_build("sm_89")["error"]


def test_the_attention_path_is_named_from_the_engine_function():
    assert doctor._attention_path(None) == "SDPA"
    assert doctor._attention_path(functools.partial(multi_query_attention, programs=132)).startswith(
        "the decode-attention kernel (SDPA for one query token")


@pytest.mark.slow
def test_the_kernel_build_for_one_arch_reports_every_specialisation_built():
    # What doctor runs for a GPU: the engine's kernels built for its arch in a fresh process (cached rows reused).
    got = doctor.kernel_build("sm_120")
    assert "error" not in got, got
    assert got["built"] > 100 and got["failed"] == [] and got["over_shared_memory"] == []


def test_each_gpu_is_named_with_its_capability_and_its_own_kernel_build(monkeypatch):
    from types import SimpleNamespace

    props = SimpleNamespace(name="NVIDIA B200", major=10, minor=0, multi_processor_count=148, total_memory=180 * 2 ** 30)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: props)
    monkeypatch.setattr(doctor, "kernel_build", lambda arch, sms: {"arch": arch, "sms": sms})
    assert doctor.gpus() == [{"index": 0, "name": "NVIDIA B200", "capability": "10.0", "arch": "sm_100", "sms": 148,
                              "memory_gib": 180.0, "kernels": {"arch": "sm_100", "sms": 148}}]
