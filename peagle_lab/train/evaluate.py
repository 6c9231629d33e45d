"""Held-out evaluation with the real engine, and the model card of a trained head.

Acceptance length (AL) and per-position acceptance come from ``SpecDecoder`` itself, at
temperature 0, on held-out prompts: the numbers a user will see when serving the head,
not a proxy computed from training logits. The drafter runs in the target's dtype, like
at inference.
"""
from __future__ import annotations

import copy
import json
import time
from dataclasses import asdict, dataclass

import torch

from ..acceptance import acceptance_length, per_position_acceptance
from ..config import SpecConfig
from ..engine import SpecDecoder


@dataclass(frozen=True)
class AcceptanceReport:
    """What the engine measured for one head at one K on the held-out prompts."""

    method: str
    k: int
    acceptance_length: float  # 1 + accepted / drafts (counts the bonus token)
    per_position_acceptance: tuple[float, ...]  # accepted at position i / drafts (vLLM's, unconditional)
    num_prompts: int
    num_drafts: int
    output_tokens: int
    tps: float  # output tokens per second (prefill included) on this device
    wall_s: float


def heldout_prompts(examples, limit: int) -> list[list[int]]:
    """The prompt ids of the first ``limit`` distinct held-out prompts, in split order."""
    prompts, seen = [], set()
    for e in examples:
        if e.prompt not in seen and len(prompts) < limit:
            seen.add(e.prompt)
            prompts.append(e.prompt_ids)
    return prompts


def eval_drafter(drafter, target):
    """A copy of ``drafter`` in the target's dtype and device, with the target's embeddings."""
    d = copy.deepcopy(drafter).to(device=target.device, dtype=target.dtype).eval()
    return d.attach_embeddings(target.embed_tokens.weight)


def evaluate_acceptance(target, drafter, prompts: list[list[int]], ks=(3, 5, 7), max_new_tokens: int = 128,
                        concurrency: int = 64, temperature: float = 0.0) -> list[AcceptanceReport]:
    """Decode ``prompts`` with ``drafter`` at every K in ``ks`` and report acceptance.

    Args:
        target / drafter: the models (the drafter is copied into the target's dtype).
        prompts: held-out prompt token ids (chat-formatted, generation prompt included).
        ks: draft lengths to measure.
        concurrency: requests decoded together.

    Raises:
        ValueError: no prompts.
    """
    if not prompts:
        raise ValueError("evaluate_acceptance needs at least one prompt")
    d = eval_drafter(drafter, target)
    reports = []
    for k in ks:
        drafts = accepted = out_tokens = 0
        per_pos = torch.zeros(k)
        t0 = time.perf_counter()
        busy = 0.0
        for start in range(0, len(prompts), concurrency):
            cfg = SpecConfig(method=d.config.method, num_speculative_tokens=k, temperature=temperature,
                             max_new_tokens=max_new_tokens)
            m = SpecDecoder(target, d, cfg).generate(prompts[start:start + concurrency]).metrics
            drafts += m.num_drafts
            accepted += m.num_accepted_tokens
            out_tokens += m.output_tokens
            per_pos += torch.tensor(m.accepted_per_position, dtype=torch.float)
            busy += m.prefill_s + m.decode_s
        reports.append(AcceptanceReport(
            d.config.method, k, acceptance_length(accepted, drafts),
            tuple(per_position_acceptance(per_pos.tolist(), drafts) or [0.0] * k), len(prompts), drafts, out_tokens,
            out_tokens / busy if busy > 0 else 0.0, time.perf_counter() - t0))
    return reports


def reports_table(reports: list[AcceptanceReport]) -> str:
    """Markdown table: K, AL and per-position acceptance."""
    width = max(r.k for r in reports)
    head = "| K | AL | " + " | ".join(f"p{i + 1}" for i in range(width)) + " | TPS |"
    rows = [head, "|" + "---|" * (width + 3)]
    for r in reports:
        cells = [f"{a:.3f}" for a in r.per_position_acceptance] + [""] * (width - r.k)
        rows.append(f"| {r.k} | {r.acceptance_length:.3f} | " + " | ".join(cells) + f" | {r.tps:.0f} |")
    return "\n".join(rows)


def _data_paragraph(data_card: dict) -> str:
    """The model card's paragraph on the data a head was trained on."""
    train, held = data_card.get("splits", {}).get("train", {}), data_card.get("splits", {}).get("heldout", {})
    sources = ", ".join(f"{k} {v}" for k, v in (train.get("by_source") or {}).items())
    greedy = train.get("greedy_token_share")
    return (f"Self-distilled from the target: {train.get('examples', '?')} training sequences "
            f"({train.get('tokens', '?')} tokens) whose responses the target generated itself"
            + (f", {100 * greedy:.0f} % of the tokens greedily" if greedy is not None else "")
            + f". Prompts by source: {sources or '?'} (Magpie turns sampled from the target under domain system "
            "prompts, coding prompts from Python standard-library docstrings, templated math and writing "
            f"prompts; {train.get('multi_turn', 0)} sequences continued by a second turn). "
            f"Held out: {held.get('prompts', '?')} prompts. Seed {data_card.get('seed', '?')}.")


def _window_paragraph(sliding_window: int) -> str:
    """The model card's words on a declared drafting window."""
    return (f"This head declares a {sliding_window}-position drafting attention window (`sliding_window` with "
            "`layer_types` in `config.json`): each drafting query sees the last "
            f"{sliding_window} positions only. It is applied at inference, not in training; heads trained on "
            "chat-length sequences keep their later drafts on long prompts that way (`docs/concepts.md`, "
            "\"Long prompts\"). Requests shorter than the window draft exactly as without it; "
            "`peagle-lab bench --draft-window none` restores full attention, and `export_for_vllm` writes the "
            "same keys.")


def model_card(summary: dict, reports: list[AcceptanceReport], data_card: dict | None = None,
               sliding_window: int | None = None) -> str:
    """The README.md of a trained head: what it is, its data, training and measured acceptance.

    Args:
        summary: the run's ``summary.json`` (config, steps, wall time, losses; written by the CLI).
        reports: held-out acceptance at each K.
        data_card: the data folder's card, if the head was trained on synthesised data.
        sliding_window: the drafting window the head declares (its config's ``sliding_window``), if any.
    """
    get, cfg = summary.get, summary.get("config", {})
    method = cfg.get("method", "?")
    nan = float("nan")
    budget = cfg.get("time_budget_s")
    steps = f"{get('steps', '?')} steps" + (f" (as many as a {budget:.0f} s budget held, timed before training)"
                                            if budget else "")
    decay = cfg.get("depth_decay") or (0.8 if method == "eagle3" else 1.0)
    depth = (f"K_train {cfg.get('k_train')} depths, COD r = {cfg.get('cod_ratio')}, r_min = {cfg.get('cod_ratio_min')}"
             if method == "peagle" else f"training-time test: {cfg.get('k_train')} unrolled steps")
    cum = get("cumulative") or {}
    tokens = (f"- {get('tokens', 0):,} target tokens in this run ({get('tokens_per_s', 0):,.0f} tokens/s on "
              f"{get('world_size', 1)} × {get('device', '?')}); {cum.get('tokens', get('tokens', 0)):,} token passes "
              f"in all ({len(cum.get('runs', [])) or 1} run(s)"
              + (f", warm-started from `{get('warm_start')}`" if get("warm_start") else "") + ")")
    lines = [
        f"# {'P-EAGLE' if method == 'peagle' else 'EAGLE-3'} head for {get('target', 'the target')} "
        f"({get('num_hidden_layers', '?')} layer(s)"
        + (f", MLP width {get('intermediate_size')}" if get("intermediate_size") else "") + ")", "",
        f"Trained with peagle_lab (`peagle-lab train --method {method}`), speculators format. Draft vocabulary "
        f"{get('draft_vocab_size', '?')} tokens (covers {100 * get('vocab_coverage', 0):.1f}% of training assistant "
        "tokens; labels outside it carry no loss).", "",
        "## Training", "",
        f"- {steps}; wall time {get('wall_s', 0):.0f} s (torch {get('torch', '?')})",
        tokens,
        f"- batch {cfg.get('batch_size')} packed rows × {cfg.get('row_len')} tokens, peak lr {cfg.get('lr')}, "
        f"{cfg.get('schedule', 'wsd')} schedule (warm-up {cfg.get('warmup_fraction')}, decay "
        f"{cfg.get('decay_fraction')} of the steps), seed {cfg.get('seed')}",
        f"- {depth}; depth d weighs {decay}^d in the loss"
        + (f"; plus {cfg['top1_weight']} × the hard cross-entropy of the target's top draft token"
           if cfg.get("top1_weight") else ""),
        f"- loss (soft cross-entropy vs the target, draft vocabulary): first log line {get('first_loss', nan):.3f}, "
        f"last {get('last_loss', nan):.3f}; held-out {get('heldout_loss') or nan:.3f}",
        "- per-depth top-1 agreement with the target at the end: "
        + ", ".join(f"{a:.2f}" for a in get("depth_acc", [])), ""]
    if data_card:
        lines += ["## Data", "", _data_paragraph(data_card), ""]
    if reports:
        r0, base = reports[0], get("baseline_tps")
        lines += ["## Held-out acceptance (temperature 0, the real engine)", "",
                  f"{r0.num_prompts} held-out prompts, {r0.output_tokens / max(r0.num_prompts, 1):.0f} new tokens "
                  f"each on average, {get('eval_concurrency', '?')} decoded together, on "
                  f"{get('eval_device', get('device', '?'))}. TPS includes prefill and CUDA-graph capture: a sanity "
                  "check, not a benchmark (see `peagle-lab bench`)"
                  + (f"; plain decoding ran at {base:.0f} tok/s." if base else "."), "", reports_table(reports), ""]
    for name, rows in (get("workloads") or {}).items():
        wr = reports_from_json(rows)
        if wr:
            lines += [f"## Benchmark workload `{name}` (prompts no training saw)", "",
                      f"{wr[0].num_prompts} prompts, temperature 0, same engine and device.", "",
                      reports_table(wr), ""]
    if sliding_window:
        lines += ["## Drafting window", "", _window_paragraph(sliding_window), ""]
    commands = [get("command", "peagle-lab train ...")] + ([get("eval_command")] if get("eval_command") else [])
    lines += ["## Reproduce", "", "```", *commands, "```", "", "<details><summary>summary.json</summary>", "",
              "```json", json.dumps(summary, indent=2, default=str), "```", "</details>", ""]
    return "\n".join(lines)


def reports_to_json(reports: list[AcceptanceReport]) -> list[dict]:
    """Reports as plain dicts (logs, summaries, callbacks)."""
    return [asdict(r) for r in reports]


def reports_from_json(rows: list[dict]) -> list[AcceptanceReport]:
    """The inverse of :func:`reports_to_json` (JSON turns the per-position tuple into a list)."""
    return [AcceptanceReport(**{**r, "per_position_acceptance": tuple(r["per_position_acceptance"])}) for r in rows]
