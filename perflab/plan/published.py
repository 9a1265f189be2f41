"""Published runs beside the plan: what torchtitan measured on 8 H100s, and what `plan` predicts for it.

The published figures are torchtitan's (perflab/shard/data/torchtitan_benchmarks.json, lesson 12's data,
each table with its file, commit and section): Llama 3.1 8B trained with FSDP on 8 H100s, local batch 2,
sequence 8192 (torchtitan's llama3_8b training config), bf16 mixed precision, selective activation
checkpointing; tokens/s per GPU and the peak memory in GiB.

Why the plan differs (`explain`), each gap a named cause:
* **Throughput.** The plan's roofline gives each operator the datasheet's dense peak and full memory
  bandwidth; real kernels reach a fraction of both (lesson 04's maximum achievable matmul FLOP/s is
  about 70–80 % of the H100's peak), and the launch gaps between kernels are not modelled: the plan's
  tokens/s is an upper bound, its MFU too.
* **Memory.** The plan counts tensors; torchtitan's figure is the CUDA caching allocator's peak
  reserved memory, which adds fragmentation, the CUDA context and NCCL's buffers. torchtitan's run was
  on the 96 GB H100 of Grand Teton hosts; the plan's fit verdict uses the table's 80 GB part, but the
  peak compared here does not depend on it. Its selective checkpointing policy (torchtitan's op-level
  SAC keeps some products' outputs) lies between the plan's `--ac full` and `--ac none`.
"""

from __future__ import annotations

from typing import Any

GIB = 2**30
# torchtitan's llama3_8b (torchtitan/models/llama3/__init__.py "8B" and train_configs/llama3_8b.toml at the
# commit of the benchmark data): the Llama 3.1 8B shapes, as a Hugging Face llama config
LLAMA3_8B = {"num_hidden_layers": 32, "hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32,
             "num_key_value_heads": 8, "vocab_size": 128256, "max_position_embeddings": 8192, "rope_theta": 500000.0}
RUN = {"gpus": 8, "fsdp": True, "micro_batch": 2, "seq": 8192, "dtype": "bf16"}


def make_target():
    """torchtitan's Llama 3.1 8B as a Hugging Face llama config, with its batch (2 × 8192 tokens)."""
    from perflab.audit.target import from_hf_config

    over = dict(LLAMA3_8B, bos_token_id=128000, eos_token_id=128001)
    return from_hf_config("llama", over, batch=RUN["micro_batch"], seq=RUN["seq"], n_batches=1)


def torchtitan_8b() -> dict[str, Any]:
    """The published row (FSDP, eager) with its source."""
    from perflab.shard.published import load

    data = load()
    tab = next(t for t in data["tables"] if t["id"] == "fsdp_8gpu")
    row = dict(zip(tab["columns"], tab["rows"][0], strict=True))
    return {"tokens_per_s_per_gpu": float(row["tokens_per_s_per_gpu"]), "memory_bytes": float(row["memory_gib"]) * GIB,
            "source": f"{data['source']['title']}, {tab['url']}, {tab['section']}"}


def side_by_side(plans: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per quantity: the published figure and each plan's (`plans`: label -> Plan), with the
    ratio plan ÷ published."""
    pub = torchtitan_8b()
    rows = []
    for label, p in plans.items():
        tps = (p.tokens_per_s or 0.0) / p.layout.gpus
        rows.append({"plan": label, "published_tokens_per_s_per_gpu": pub["tokens_per_s_per_gpu"],
                     "plan_tokens_per_s_per_gpu": tps, "tokens_ratio": tps / pub["tokens_per_s_per_gpu"],
                     "published_memory_gb": pub["memory_bytes"] / 1e9, "plan_peak_gb": p.peak_bytes / 1e9,
                     "memory_ratio": p.peak_bytes / pub["memory_bytes"], "mfu": p.mfu})
    return rows
