"""Published runs beside the plan: what torchtitan measured on 8 H100s, and llm-foundry's MPT rows.

The published figures are torchtitan's (perflab/shard/data/torchtitan_benchmarks.json, lesson 12's data,
each table with its file, commit and section): Llama 3.1 8B trained with FSDP on 8 H100s, local batch 2,
sequence 8192 (torchtitan's llama3_8b training config), bf16 mixed precision, selective activation
checkpointing; tokens/s per GPU and the peak memory in GiB. `perflab.plan.compare` sets the plan beside
more published runs (torchtitan's 128-GPU, tensor-parallel and A100 rows, llm-foundry's other rows).

What is not like for like (`side_by_side` gives the figures):
* **The GPU.** torchtitan's H100s were 96 GB HBM2e parts at 500 W with 2.4 TB/s (the benchmark file's
  Hardware section), whose exact peak torchtitan says it does not know ("between SXM and NVL"): the plan
  uses `h100-hbm2e-96gb`, the SXM5's peaks with that memory and bandwidth (perflab/plan/data/clusters.json).
* **Recompute.** torchtitan recomputed selectively (its op-level policy keeps some products' outputs):
  its cost lies between the plan's `--ac full` and `--ac none`, which bracket it.
* **Memory.** The plan counts tensors; torchtitan's figure is the CUDA caching allocator's peak
  *reserved* memory (its metrics log `max_reserved`, torchtitan/components/metrics.py), which adds
  fragmentation, the CUDA context and NCCL's buffers.
* **The model's code.** The plan runs Hugging Face's Llama with torchtitan's shapes, not torchtitan's
  own model; and Table 1's other rows add torch.compile and Float8, which the plan does not model.
* **Throughput.** The plan is an estimate (`perflab.plan.cost`): every kernel at the datasheet's peak and
  bandwidth (real kernels reach 60–80 % of the matmul peak, lesson 04), but an unfused model's
  memory-bound work counted in full. The two pull opposite ways; the rows say how they net out.

MosaicML llm-foundry's throughput table (perflab/plan/data/llm_foundry_throughput.json, with its repository,
path and commit): MPT models trained with FSDP (FULL_SHARD) on 8 H100s, bf16, no activation checkpointing,
flash attention; tokens/s per GPU and MFU. The MPT shapes are planned as a GPT-2 config with the same
width, depth, heads, vocabulary and positions (learned position embeddings, tied embedding, MLP ×4,
biases, GELU): MPTConfig keeps biases by default (`no_bias=False`, llmfoundry/models/mpt/configuration_mpt.py),
and the plan's parameter count is the table's NumParams to the parameter (`foundry_side_by_side` compares
them).

Why the plan differs from llm-foundry's rows (`foundry_side_by_side` gives the figures):
* **Throughput.** The plan's roofline books each operator at the datasheet's peak and full memory
  bandwidth, with no launch gaps; but it plans Hugging Face's GPT-2 as it runs unfused, where MPT runs
  fused kernels (low-precision LayerNorm, FlashAttention, a fused loss): the plan's memory-bound
  pointwise work is MPT's extra cost, not the real job's. The two errors pull opposite ways.
* **MFU.** llm-foundry counts attention whole (2·2·d·s² per layer forward, as if not causal) and
  6 FLOPs per parameter per token; the plan counts the operators torch runs. `mfu_foundry` is the
  plan's tokens/s in llm-foundry's convention, so the two MFUs compare like for like.
* **Memory.** The table gives none; each run fitted an 80 GB H100. The plan's peak for the same
  micro-batch can be above that: it keeps GPT-2's unfused LayerNorm inputs and the fp32 logits of the
  loss (b·s·50368 values), which MPT's fused kernels (low-precision LayerNorm, fused cross-entropy) do not.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perflab.core.jsonable import JSON

FOUNDRY_DATA = Path(__file__).with_name("data") / "llm_foundry_throughput.json"

GIB = 2**30
# torchtitan's llama3_8b (torchtitan/models/llama3/__init__.py "8B" and train_configs/llama3_8b.toml at the
# commit of the benchmark data): the Llama 3.1 8B shapes, as a Hugging Face llama config
LLAMA3_8B = {"num_hidden_layers": 32, "hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32,
             "num_key_value_heads": 8, "vocab_size": 128256, "max_position_embeddings": 8192, "rope_theta": 500000.0}
RUN = {"gpus": 8, "fsdp": True, "micro_batch": 2, "seq": 8192, "dtype": "bf16"}


RUN_GPU = "h100-hbm2e-96gb"  # the benchmark's 96 GB HBM2e H100 at 500 W (perflab/plan/data/clusters.json)


def make_target():
    """torchtitan's Llama 3.1 8B as a Hugging Face llama config, with its batch (2 × 8192 tokens)."""
    from perflab.plan.target import from_hf

    over = dict(LLAMA3_8B, bos_token_id=128000, eos_token_id=128001)
    return from_hf("llama", over, batch=RUN["micro_batch"], seq=RUN["seq"])


@dataclass(frozen=True)
class PublishedRun:
    """A published run's figures: tokens/s per GPU, the peak memory in bytes, and where they are printed."""

    tokens_per_s_per_gpu: float
    memory_bytes: float
    source: str


def torchtitan_8b() -> PublishedRun:
    """The published row (FSDP, eager) with its source."""
    from perflab.shard.published import load

    data = load()
    tab = next(t for t in data["tables"] if t["id"] == "fsdp_8gpu")
    row = dict(zip(tab["columns"], tab["rows"][0], strict=True))
    return PublishedRun(float(row["tokens_per_s_per_gpu"]), float(row["memory_gib"]) * GIB,
                        f"{data['source']['title']}, {tab['url']}, {tab['section']}")


def side_by_side(plans: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per quantity: the published figure and each plan's (`plans`: label -> Plan), with the
    ratio plan ÷ published."""
    pub = torchtitan_8b()
    rows = []
    for label, p in plans.items():
        tps = (p.tokens_per_s or 0.0) / p.layout.gpus
        rows.append({"plan": label, "published_tokens_per_s_per_gpu": pub.tokens_per_s_per_gpu,
                     "plan_tokens_per_s_per_gpu": tps, "tokens_ratio": tps / pub.tokens_per_s_per_gpu,
                     "published_memory_gb": pub.memory_bytes / 1e9, "plan_peak_gb": p.peak_bytes / 1e9,
                     "memory_ratio": p.peak_bytes / pub.memory_bytes, "mfu": p.mfu})
    return rows


# ----------------------------------------------------------------------------- llm-foundry's MPT rows
def foundry() -> JSON:
    """llm-foundry's table as its data file has it: {'source': repo, path, commit, URL; 'rows': one dict per
    row, each with its model's 'shape'}."""
    data = json.loads(FOUNDRY_DATA.read_text())
    rows = [dict(zip(data["columns"], r, strict=True)) for r in data["rows"]]
    for r in rows:
        r["shape"] = data["models"][r["model"]]
    return {"source": data["source"], "rows": rows}


def mpt_overrides(shape: dict[str, int], seq: int) -> dict[str, int | float | str]:
    """An MPT shape as a GPT-2 config (learned positions, tied embedding, MLP ×4, torch's GELU, SDPA, no
    dropout: MPT's benchmark configs train without it)."""
    return {"n_embd": shape["d_model"], "n_layer": shape["n_layers"], "n_head": shape["n_heads"], "n_positions": seq,
            "vocab_size": shape["vocab_size"], "n_inner": shape["expansion_ratio"] * shape["d_model"],
            "activation_function": "gelu", "attn_pdrop": 0.0, "resid_pdrop": 0.0, "embd_pdrop": 0.0}


def mpt_target(row: dict[str, Any]):
    """A factory of the row's model and micro-batch (random tokens)."""
    from perflab.plan.target import from_hf

    over = dict(mpt_overrides(row["shape"], row["seq_len"]), bos_token_id=0, eos_token_id=0)
    return lambda: from_hf("gpt2", over, batch=row["micro_batch"], seq=row["seq_len"])


def foundry_mfu(tokens_per_s_per_gpu: float, params: float, shape: dict[str, int], seq: int, peak_flops: float) -> float:
    """MFU in llm-foundry's convention: (6·N + 12·layers·d·s) FLOPs per token (attention counted whole),
    divided where every MFU is (`perflab.flops.mfu.utilization`); NaN when it cannot be (no peak)."""
    from perflab.flops.mfu import spec_basis, utilization

    per_token = 6 * params + 3 * shape["n_layers"] * 2 * 2 * shape["d_model"] * seq
    basis = spec_basis(peak_flops / 1e12, "bf16", "given", "given peak")
    u = utilization(1.0, {"bf16": per_token * tokens_per_s_per_gpu}, {"bf16": basis})
    return u.mfu if u.mfu is not None else math.nan


def foundry_side_by_side(models: tuple[str, ...] | None = None) -> list[dict[str, Any]]:
    """Each published row (or those of `models`) beside `perflab plan`'s prediction of it on the same
    GPUs, sharding and micro-batch: tokens/s per GPU, MFU (the plan's own, and in llm-foundry's
    convention), parameters, and the plan's per-GPU peak against the 80 GB the run fitted in."""
    from perflab.plan.run import plan

    data = foundry()
    out = []
    for row in data["rows"]:
        if models is not None and row["model"] not in models:
            continue
        p = plan(mpt_target(row), gpu="h100", gpus=row["gpus"], fsdp=row["sharding"] == "FULL_SHARD",
                 ac="full" if row["activation_checkpointing"] else "none", dtype="bf16", suggest=False)
        tps = (p.tokens_per_s or 0.0) / row["gpus"]
        peak = (p.cluster.peak("bf16") or 0.0) * 1e12
        out.append({"model": f"MPT-{row['model']}", "gpus": row["gpus"], "seq": row["seq_len"],
                    "micro_batch": row["micro_batch"], "published_params": row["num_params"],
                    "plan_params": p.params_total, "published_tokens_per_s_per_gpu": float(row["tokens_per_s_per_gpu"]),
                    "plan_tokens_per_s_per_gpu": tps, "tokens_ratio": tps / row["tokens_per_s_per_gpu"],
                    "published_mfu": row["mfu_pct"] / 100, "plan_mfu": p.mfu,
                    "plan_mfu_foundry": foundry_mfu(tps, p.params_total, row["shape"], row["seq_len"], peak),
                    "plan_peak_gb": p.peak_bytes / 1e9, "gpu_gb": p.cluster.memory_bytes / 1e9,
                    "source": f"{data['source']['repo']} {data['source']['path']} @ {data['source']['commit'][:12]}"})
    return out
