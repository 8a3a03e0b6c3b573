"""The text report: the layout, every phase's terms with their arithmetic, the verdicts."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from darling_nemo.plan.estimate import Plan
from darling_nemo.plan.terms import GIB, Term, gib


@dataclass
class Labelled:
    label: str
    plan: Plan


def _header(plan: Plan) -> list[str]:
    lay, arch = plan.layout, plan.arch
    vllm = (
        f"vLLM TP {lay.vllm_tp} x PP {lay.vllm_pp}, gpu_memory_utilization "
        f"{lay.vllm_gpu_memory_utilization}, max_model_len {lay.vllm_max_model_len:,}, "
        f"{'colocated' if lay.colocated else 'own GPUs'}"
    )
    return [
        f"model   {arch.describe()}",
        f"layout  policy on {lay.policy_nodes} node(s) x {lay.policy_gpus_per_node} GPUs = "
        f"{lay.world_size} (cluster {lay.num_nodes} x {lay.gpus_per_node}"
        f"{', reward model ' + lay.reward_model if lay.reward_model else ''}); "
        f"Megatron TP {lay.tp} x PP {lay.pp} x CP {lay.cp} -> DP {lay.dp}; "
        f"sequence parallel {'on' if lay.sequence_parallel else 'off'}; activation "
        f"checkpointing {'on' if lay.activation_checkpointing else 'off'}; {lay.precision}",
        f"tokens  {lay.train_mb_tokens:,} per training micro-batch, {lay.logprob_mb_tokens:,} "
        f"per logprob micro-batch; {vllm}",
    ]


def _term_lines(terms: Sequence[Term], width: int) -> list[str]:
    """One line per term, then their total."""
    lines = [f"  {t.label:<{width}}  {gib(t.bytes):>11}  = {t.arithmetic}" for t in terms]
    lines.append(f"  {'total':<{width}}  {gib(sum(t.bytes for t in terms)):>11}")
    return lines


def render(plan: Plan, others: Sequence[Labelled] = (), target_label: str | None = None) -> str:
    out = _header(plan)
    out += ["", f"Per-GPU peaks, {target_label or 'target GPU'} ({plan.capacity_gib:.1f} GiB):"]
    width = max(len(t.label) for p in plan.phases for t in p.terms)
    for phase in plan.phases:
        out.append(f"[{phase.name}] {phase.where}")
        out += _term_lines(phase.terms, width)
        if phase.extra_check:
            out.append(f"  check: {phase.extra_check[1]}")
    out.append("[host RAM per node] what colocated NeMo-RL offloads to CPU between phases")
    out += _term_lines(plan.host_terms, width)
    out += ["", "Verdict:"]
    for label, p in [(target_label or "this GPU", plan), *[(o.label, o.plan) for o in others]]:
        out.append(f"  {label:<18} {verdict_line(p)}")
    out.extend(f"note: {n}" for n in plan.notes)
    return "\n".join(out)


def verdict_line(plan: Plan) -> str:
    capacity = plan.capacity_gib * GIB
    fits, tight = plan.verdict()
    worst = max((p for p in plan.phases if not p.reservation), key=lambda p: p.total)
    failed = list(
        dict.fromkeys(
            p.name
            for p in plan.phases
            if p.total > capacity or (p.extra_check is not None and not p.extra_check[0])
        )
    )
    head = f"({plan.capacity_gib:.1f} GiB): "
    if not fits:
        return head + f"DOES NOT FIT ({', '.join(failed)}; peak {gib(worst.total)})"
    free = capacity - worst.total
    word = "fits, tight" if tight else "fits"
    return head + f"{word}: peak {gib(worst.total)} in {worst.name}, {gib(free)} free"
