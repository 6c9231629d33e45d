"""Throughput benchmarks: P-EAGLE vs EAGLE-3 vs plain decoding (issue 6).

| module        | what                                                                  |
| ------------- | --------------------------------------------------------------------- |
| ``workloads`` | chat / code (HumanEval) / long-context prompts, offline and seeded    |
| ``sweep``     | ``SweepConfig``, ``plan_cells``, ``run_sweep``: method × K × c × workload |
| ``reference`` | transformers' static-cache ``generate`` of the same weights           |
| ``schema``    | ``BenchRow`` / ``BenchResult``, ``validate_result``, JSON and CSV     |
| ``analysis``  | best K, method ratios, pooled acceptance, the goals                   |
| ``report``    | headline text table and the offline HTML report                       |
| ``archive``   | the results archive: run folders, ``latest``, the results index       |
| ``cli``       | ``peagle-lab bench`` (``python -m peagle_lab.bench.cli``)             |

Nothing here imports plotly except ``report.write_report`` (through ``peagle_lab.bench.plots``),
so sweeps run where plotly is not installed.
"""
from .schema import BenchResult, BenchRow, SchemaError, read_json, validate_result, write_csv, write_json
from .workloads import Prompt, benchmark_prompt_texts, load_workload

__all__ = ["BenchResult", "BenchRow", "Prompt", "SchemaError", "benchmark_prompt_texts", "load_workload",
           "read_json", "validate_result", "write_csv", "write_json"]
