"""Choosing the P-EAGLE depth from per-depth sweep results (peagle_lab.bench.depth)."""
import json

import pytest

from peagle_lab.bench.depth import choose_depth, main
from peagle_lab.bench.schema import BenchResult, BenchRow, write_json
from peagle_lab.provenance import run_info


def _row(method, k, c, tps, workload="chat"):
    return BenchRow(method, k, c, workload, 0.0, tps, 1.0, 1.0 + 0.5 * k, [0.5] * k, 2, k, 1.0, 0.1, 0.1, 100)


def _result(*rows):
    return BenchResult({"device": "test"}, {}, list(rows))


def test_choice_uses_best_k_per_column_and_shared_columns_only():
    d1 = _result(_row("peagle", 3, 1, 100.0), _row("peagle", 7, 1, 400.0), _row("peagle", 3, 64, 1000.0),
                 _row("baseline", 0, 1, 9999.0))  # other methods never count
    d3 = _result(_row("peagle", 3, 1, 300.0), _row("peagle", 3, 64, 1100.0),
                 _row("peagle", 3, 8, 50.0))  # c=8 only here: not a shared column
    choice = choose_depth({1: d1, 3: d3})
    assert choice.columns == ["chat/T=0/c=1", "chat/T=0/c=64"]
    assert choice.layers == 1  # sqrt(400*1000)=632 > sqrt(300*1100)=574
    assert choice.scores[0].columns["chat/T=0/c=1"]["k"] == 7
    assert [s.layers for s in choice.scores] == [1, 3]


def test_tie_goes_to_the_shallower_head():
    same = [_row("peagle", 5, 1, 200.0)]
    assert choose_depth({4: _result(*same), 2: _result(*same)}).layers == 2


@pytest.mark.parametrize("results, match", [
    ({}, "no results"),
    ({0: _result(_row("peagle", 3, 1, 1.0))}, "not a layer count"),
    ({1: _result(_row("eagle3", 3, 1, 1.0))}, "no 'peagle' rows"),
    ({1: _result(_row("peagle", 3, 1, 1.0)), 2: _result(_row("peagle", 3, 2, 1.0))}, "share no"),
])
def test_bad_inputs_are_named(results, match):
    with pytest.raises(ValueError, match=match):
        choose_depth(results)


def test_cli_writes_the_choice(tmp_path, capsys):
    info = run_info("test")
    for layers, tps in ((1, 100.0), (2, 150.0)):
        write_json(BenchResult(info, {}, [_row("peagle", 3, 1, tps)]), tmp_path / f"d{layers}.json")
    out = tmp_path / "choice.json"
    assert main([f"1={tmp_path / 'd1.json'}", f"2={tmp_path / 'd2.json'}", "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["chosen_layers"] == 2 and doc["run_info"]["1"]["command"] == "test"
    assert "chosen: 2 layer(s)" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["two=x.json"])
    with pytest.raises(SystemExit):
        main([f"1={tmp_path / 'missing.json'}"])
