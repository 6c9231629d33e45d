"""The result schema: round trips, the validator's rules, the CSV writer."""
from __future__ import annotations

import copy
import csv
import json
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from peagle_lab.bench.schema import (
    OPTIONAL_ROW_FIELDS, REQUIRED_ROW_FIELDS, SCHEMA, BenchResult, BenchRow, SchemaError, SkippedCell, read_json,
    validate_result, validate_row, write_csv, write_json,
)

RUN_INFO = {"device": "CPU", "torch": "2.13", "command": "peagle-lab bench --tiny", "commit": None,
            "date": "2026-11-29"}


def spec_row(**kw) -> dict:
    """A consistent P-EAGLE row: 100 drafts at K=3, accepted 80/50/20 at positions 1..3."""
    d = dict(method="peagle", k=3, concurrency=4, workload="chat", temperature=0.0, tps=812.5, tpot_ms=4.9,
             acceptance_length=2.5, per_position_acceptance=[0.8, 0.5, 0.2], num_drafts=100,
             num_accepted_tokens=150, verify_ms=3.7, prep_ms=0.45, draft_ms=0.4, output_tokens=512,
             source="peagle_lab")
    d.update(kw)
    return d


def baseline_row(**kw) -> dict:
    d = spec_row(method="baseline", k=0, acceptance_length=1.0, per_position_acceptance=[], num_drafts=0,
                 num_accepted_tokens=0, prep_ms=0.0, draft_ms=0.0)
    d.update(kw)
    return d


def result_dict(rows) -> dict:
    return {"schema": SCHEMA, "run_info": RUN_INFO, "config": {"ks": [3]}, "rows": rows, "skipped": []}


def test_required_fields_are_the_shared_contract():
    assert REQUIRED_ROW_FIELDS == (
        "method", "k", "concurrency", "workload", "temperature", "tps", "tpot_ms", "acceptance_length",
        "per_position_acceptance", "num_drafts", "num_accepted_tokens", "verify_ms", "prep_ms", "draft_ms",
        "output_tokens", "source")
    assert not set(REQUIRED_ROW_FIELDS) & set(OPTIONAL_ROW_FIELDS)


def test_json_round_trip_keeps_rows_skips_and_unknown_fields(tmp_path):
    vllm = spec_row(source="vllm", verify_ms=None, prep_ms=None, draft_ms=None, request_rate=8.0)
    rows = [spec_row(), baseline_row(step_ms=3.3, num_prompts=4), vllm]
    res = BenchResult.from_dict(result_dict(rows))
    res.skipped.append(SkippedCell("long", "eagle3", 7, 64, 0.0, "time budget"))
    path = write_json(res, tmp_path / "sub" / "bench.json")
    back = read_json(path)
    assert back.to_dict() == res.to_dict()
    assert back.rows[2].extra == {"request_rate": 8.0}
    assert back.rows[1].step_ms == 3.3 and back.rows[0].key == ("peagle_lab", "chat", 0.0, "peagle", 3, 4)


@pytest.mark.parametrize("change, message", [
    (dict(method="medusa"), "method"),
    (dict(source="sglang"), "source"),
    (dict(k=0), "k"),  # a speculative row needs k >= 1
    (dict(concurrency=0), "concurrency"),
    (dict(tps=-1.0), "tps"),
    (dict(tps=math.nan), "tps"),
    (dict(tps=True), "tps"),
    (dict(num_drafts=10.5), "num_drafts"),
    (dict(acceptance_length=4.5), "acceptance_length"),  # above K + 1
    (dict(acceptance_length=2.0), "acceptance_length"),  # != 1 + 150/100
    (dict(num_accepted_tokens=301, acceptance_length=4.01), "num_accepted_tokens"),  # > drafts * K
    (dict(per_position_acceptance=[0.8, 0.7]), "per_position_acceptance"),  # length != K
    (dict(per_position_acceptance=[0.5, 0.8, 0.2]), "per_position_acceptance"),  # increasing
    (dict(per_position_acceptance=[0.8, 0.5, 0.1]), "per_position_acceptance"),  # 1 + sum != AL
    (dict(per_position_acceptance=[1.2, 0.3, 0.0]), "per_position_acceptance"),
    (dict(verify_ms=None), "verify_ms"),  # our engine always times its steps
    (dict(workload=""), "workload"),
    (dict(agreement=1.5), "agreement"),
    (dict(mean_context=-3.0), "mean_context"),
    (dict(longest_row_context="900"), "longest_row_context"),
    (dict(mean_context=320.0, longest_context=300.0), "mean_context"),  # a mean above its longest
    (dict(mean_row_context=950.5, longest_row_context=900.0), "mean_row_context"),
])
def test_validator_rejects_bad_rows(change, message):
    with pytest.raises(SchemaError, match=message):
        validate_row(spec_row(**change))


def test_validator_accepts_recorded_contexts_and_rows_without_them():
    validate_row(spec_row(mean_context=300.0, longest_context=1100.5, mean_row_context=310.0,
                          longest_row_context=1100.5))
    validate_row(spec_row(mean_context=None, longest_context=None))
    validate_row(spec_row())


def test_validator_rejects_a_baseline_that_drafts():
    with pytest.raises(SchemaError, match="k"):
        validate_row(baseline_row(k=3))
    with pytest.raises(SchemaError, match="baseline"):
        validate_row(baseline_row(num_drafts=5))


def test_validator_accepts_rows_of_other_sources_without_step_times():
    validate_row(spec_row(source="vllm", verify_ms=None, prep_ms=None, draft_ms=None, per_position_acceptance=[]))
    validate_row(baseline_row(source="transformers", prep_ms=None, draft_ms=None))


def test_validator_rejects_missing_fields_and_bad_documents():
    row = spec_row()
    del row["tpot_ms"]
    with pytest.raises(SchemaError, match="missing fields tpot_ms"):
        validate_row(row)
    good = result_dict([spec_row(), baseline_row()])
    validate_result(good)
    for mutate, message in [
        (lambda d: d.update(schema="peagle_lab.bench/0"), "schema"),
        (lambda d: d["run_info"].pop("commit"), "run_info"),
        (lambda d: d["rows"].append(spec_row()), "duplicates rows\\[0\\]"),
        (lambda d: d.update(rows={}), "rows"),
        (lambda d: d.update(skipped=[{"workload": "chat"}]), "skipped\\[0\\]"),
    ]:
        bad = copy.deepcopy(good)
        mutate(bad)
        with pytest.raises(SchemaError, match=message):
            validate_result(bad)


def test_read_json_names_the_file_when_it_is_not_json(tmp_path):
    p = tmp_path / "broken.json"
    p.write_text("{not json")
    with pytest.raises(SchemaError, match="broken.json"):
        read_json(p)


def test_write_json_refuses_an_invalid_result(tmp_path):
    res = BenchResult(RUN_INFO, {}, [BenchRow.from_dict(spec_row(tps=-5.0))])
    with pytest.raises(SchemaError, match="tps"):
        write_json(res, tmp_path / "x.json")
    assert not (tmp_path / "x.json").exists()


def test_csv_has_one_line_per_row_and_the_shared_columns(tmp_path):
    res = BenchResult.from_dict(result_dict([spec_row(), baseline_row(source="transformers", prep_ms=None)]))
    path = write_csv(res, tmp_path / "bench.csv")
    with open(path) as f:
        lines = list(csv.DictReader(f))
    assert list(lines[0]) == list(REQUIRED_ROW_FIELDS + OPTIONAL_ROW_FIELDS)
    assert len(lines) == 2
    assert lines[0]["per_position_acceptance"] == "0.8;0.5;0.2"
    assert lines[1]["prep_ms"] == "" and lines[1]["source"] == "transformers"


@st.composite
def consistent_rows(draw):
    """Rows built from raw counts the way the sweep builds them."""
    k = draw(st.integers(1, 8))
    drafts = draw(st.integers(0, 500))
    counts, cap = [], drafts
    for _ in range(k):  # accepting position i needs every position before it
        cap = draw(st.integers(0, cap))
        counts.append(cap)
    acc = sum(counts)
    return spec_row(k=k, num_drafts=drafts, num_accepted_tokens=acc,
                    acceptance_length=1 + acc / drafts if drafts else 1.0,
                    per_position_acceptance=[a / drafts for a in counts] if drafts else [],
                    tps=draw(st.floats(0, 1e6)), concurrency=draw(st.integers(1, 256)))


@given(consistent_rows())
def test_rows_built_from_counts_validate_and_round_trip(row):
    validate_row(row)
    back = json.loads(json.dumps(BenchRow.from_dict(row).to_dict()))
    assert {k: back[k] for k in row} == row
