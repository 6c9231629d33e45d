"""The README's paper-beside-lab table (peagle_lab.lab.paper.readme_table) from small synthetic sweeps with known
numbers: c = 1, best K and acceptance length from the static sweep, c = 64 from the continuous one, bad files named."""
from __future__ import annotations

import json

import pytest

from peagle_lab.lab import paper

# {(workload, c): {method: {K: (tok/s, AL)}}}: best K among 3, 5, 7 is starred in the comments
STATIC = {("mt_bench", 1): {"peagle": {3: (100, 3.0), 5: (150, 4.5), 7: (140, 5.0), 8: (999, 6.0)},  # P* K=5
                            "eagle3": {3: (100, 2.5), 5: (90, 3.0), 7: (80, 3.2)}},  # E* K=3 -> 1.50x
          ("code", 1): {"peagle": {3: (200, 3.1), 5: (210, 3.5), 7: (260, 3.9)},  # P* K=7
                        "eagle3": {3: (180, 2.6), 5: (200, 3.3), 7: (190, 3.4)}},  # E* K=5 -> 1.30x
          ("mt_bench", 64): {"peagle": {5: (600, 4.0)}, "eagle3": {3: (500, 3.0)}},  # 1.20x
          ("code", 64): {"peagle": {5: (550, 3.5)}, "eagle3": {3: (500, 2.9)}}}  # 1.10x
CONTINUOUS = {("mt_bench", 64): {"peagle": {3: (900, 3.0), 7: (1300, 5.0)}, "eagle3": {3: (1000, 2.5), 7: (800, 3)}},
              ("code", 64): {"peagle": {5: (1400, 3.5), 8: (5000, 4.0)}, "eagle3": {3: (1000, 2.6)}}}  # 1.30x, 1.40x
STATIC_PATH = "docs/results/gpu/answer_length/static/bench.json"
CONT_PATH = "docs/results/gpu/answer_length/continuous/bench.json"


def _doc(cells, continuous=0, device="GPU-A", digests=None, **cfg) -> dict:
    rows = [{"method": m, "k": k, "concurrency": c, "workload": w, "temperature": 0.0, "tps": tps,
             "acceptance_length": al, "source": "peagle_lab", **({"continuous": True} if continuous else {})}
            for (w, c), methods in cells.items() for m, ks in methods.items() for k, (tps, al) in ks.items()]
    config = {"model": "SmolLM2-135M-Instruct (embedded default)", "dtype": "bfloat16", "max_new_tokens": 1024,
              "ignore_eos": False, "continuous": continuous, **cfg}
    if digests:
        config["head_digests"] = digests
    return {"run_info": {"device": device, "date": "2026-12-06T00:00:00+00:00"}, "config": config, "rows": rows}


def _lab_row(table: str) -> list[str]:
    line = next(ln for ln in table.splitlines() if ln.startswith("| lab "))
    return [cell.strip() for cell in line.strip("|").split("|")]


def test_c64_comes_from_the_continuous_sweep_and_the_rest_from_the_static_one():
    table = paper.readme_table(_doc(STATIC), STATIC_PATH, (_doc(CONTINUOUS, continuous=4), CONT_PATH))
    name, setting, c1, c64, ks, als, _, data = _lab_row(table)
    assert name == "lab (MT-Bench / HumanEval)" and setting.endswith("GPU-A, bfloat16")
    assert (c1, c64) == ("1.50× / 1.30×", "1.30× / 1.40×")  # K = 8 (5000 tok/s) is outside the protocol
    assert ks == "P-EAGLE 5 / 7, EAGLE-3 3 / 5" and als == "P-EAGLE 4.50 / 3.90, EAGLE-3 2.50 / 3.30"
    assert data == f"[c = 1]({STATIC_PATH}), [c = 64]({CONT_PATH})"
    note = table.split("\n\n")[1]
    assert f"c = 64 column ([bench.json]({CONT_PATH})) batches continuously" in note
    assert f"acceptance length come from [bench.json]({STATIC_PATH})" in note and "static batch" not in note


def test_without_a_continuous_sweep_c64_is_the_static_batch_and_the_note_says_so():
    table = paper.readme_table(_doc(STATIC), STATIC_PATH)
    _, _, c1, c64, *_, data = _lab_row(table)
    assert (c1, c64, data) == ("1.50× / 1.30×", "1.20× / 1.10×", f"[bench.json]({STATIC_PATH})")
    assert "c = 64 column is one static batch of 64 answers" in table and "batches continuously" not in table.split(
        "static batch of 64 answers")[0]


def test_a_second_device_or_answer_budget_is_named_beside_the_first():
    table = paper.readme_table(_doc(STATIC), STATIC_PATH,
                               (_doc(CONTINUOUS, continuous=4, device="GPU-B", max_new_tokens=512), CONT_PATH))
    assert _lab_row(table)[1].endswith("GPU-A, bfloat16 (c = 64: GPU-B, bfloat16)")
    assert "at most 1024 (c = 64: 512) new tokens" in table


def test_root_prefixes_the_links_to_docs_for_a_page_below_the_repository_root():
    import re

    readme = paper.readme_table(_doc(STATIC), STATIC_PATH)  # the README sits at the root
    assert "[The paper page](docs/paper.md)" in readme and "[history](docs/results/history.md)" in readme
    notebook = paper.readme_table(_doc(STATIC), f"../{STATIC_PATH}", root="../")  # a notebook under notebooks/
    links = re.findall(r"\]\(([^)]+)\)", notebook)
    assert "../docs/paper.md" in links and "../docs/results/history.md" in links
    assert all(link.startswith(("../", "http")) for link in links), links


@pytest.mark.parametrize("static, continuous, match", [
    (_doc(STATIC, ignore_eos=True), None, "static/bench.json is not an answer-length sweep: config.ignore_eos is True"),
    (_doc(STATIC), _doc(STATIC), "continuous/bench.json has config.continuous = 0; expected a sweep batching"),
    (_doc(STATIC), _doc({("code", 64): {"eagle3": {3: (1000, 2.6)}}}, continuous=4),
     "continuous/bench.json has no P-EAGLE rows at c = 64"),
    (_doc({k: v for k, v in STATIC.items() if k[1] == 64}), None, "static/bench.json has no EAGLE-3 rows at c = 1"),
    ({"shapes": {}}, None, "static/bench.json is not a bench document"),
    (_doc(STATIC, digests={"peagle": "a" * 16}), _doc(CONTINUOUS, continuous=4, digests={"peagle": "b" * 16}),
     "the two sweeps ran different heads"),
])
def test_a_sweep_the_table_cannot_read_is_refused_by_name(static, continuous, match):
    with pytest.raises(ValueError, match=match):
        paper.readme_table(static, STATIC_PATH, None if continuous is None else (continuous, CONT_PATH))


def test_main_readme_takes_an_optional_continuous_path_and_links_both_from_the_page(tmp_path):
    sweeps = tmp_path / "docs" / "results"
    sweeps.mkdir(parents=True)
    (sweeps / "static.json").write_text(json.dumps(_doc(STATIC)))
    (sweeps / "continuous.json").write_text(json.dumps(_doc(CONTINUOUS, continuous=4)))
    page = tmp_path / "README.md"
    page.write_text(f"# t\n\n{paper.README_BEGIN}\nold\n{paper.README_END}\nafter\n")
    assert paper.main(["--readme", str(page), str(sweeps / "static.json"), str(sweeps / "continuous.json")]) == 0
    text = page.read_text()
    assert "old" not in text and text.endswith(f"{paper.README_END}\nafter\n")
    assert _lab_row(text)[3] == "1.30× / 1.40×"
    assert "[c = 1](docs/results/static.json), [c = 64](docs/results/continuous.json)" in text
    (sweeps / "fixed.json").write_text(json.dumps(_doc(STATIC, ignore_eos=True)))
    with pytest.raises(ValueError, match="fixed.json is not an answer-length sweep"):
        paper.main(["--readme", str(page), str(sweeps / "fixed.json")])
    (sweeps / "broken.json").write_text("{not json")
    with pytest.raises(ValueError, match="broken.json is not a JSON file"):
        paper.main(["--readme", str(page), str(sweeps / "static.json"), str(sweeps / "broken.json")])
    assert paper.main(["--readme"]) == 2  # no page: the usage


def test_the_newest_committed_continuous_sweep_batches_continuously_at_c64():
    found = paper.continuous_sweep()
    if found is None:
        pytest.skip("no continuous-batching answer-length sweep is committed")
    doc, path = found
    paper.check_answer_sweep(doc, path, 64, continuous=True)
    assert all(r.get("continuous") for r in doc["rows"] if r["concurrency"] == 64)
