"""What the forward pass keeps for the backward pass, storage by storage, against the estimate (lesson 03).

    >>> _, saved = saved_tensors(lambda: model_loss(m, batch), exclude=[*m.parameters(), *batch])
    >>> saved.by_shape()                         # every saved storage once, grouped by shape and dtype
    >>> check = activation_check(preset("small-gpt"), batch=4)
    >>> check.text(); check.parts_table(); check.paper_table()

`saved_tensors` lists what `torch.autograd.graph.saved_tensors_hooks` sees; `activation_check` runs one
forward of perflab's model under it and puts the total beside `perflab.memory.estimate.model_activation_bytes`
(exact on a CPU) and beside Korthikanti et al.'s formula for the same shape. `perflab.memory.probe`
re-exports `SavedTensors` and `saved_tensors`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass
class SavedTensors:
    """Storages the autograd graph keeps for backward, each counted once (views share a storage)."""

    total_bytes: int
    storages: list[dict[str, Any]]

    def by_shape(self):
        import pandas as pd

        df = pd.DataFrame(self.storages)
        if df.empty:
            return df
        g = df.groupby(["shape", "dtype"], sort=False).agg(count=("bytes", "size"), bytes_each=("bytes", "first"),
                                                          total_bytes=("bytes", "sum")).reset_index()
        return g.sort_values("total_bytes", ascending=False, ignore_index=True)


def saved_tensors(fn: Callable[[], Any], exclude=()) -> tuple[Any, SavedTensors]:
    """Run `fn()` under `torch.autograd.graph.saved_tensors_hooks` and list every storage the graph
    saves for backward, except those of the tensors in `exclude` (the parameters, the inputs).
    Returns (fn's result, SavedTensors). Checkpointed regions save through their own hooks and are
    not seen here: measure them with `allocated_during`."""
    import torch

    skip = {t.untyped_storage().data_ptr() for t in exclude}
    seen: dict[int, dict[str, Any]] = {}

    def pack(t):
        st = t.untyped_storage()
        key = st.data_ptr()
        if key not in skip and key not in seen:
            seen[key] = {"shape": tuple(t.shape), "dtype": str(t.dtype).replace("torch.", ""), "bytes": st.nbytes()}
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn()
    items = list(seen.values())
    return out, SavedTensors(sum(i["bytes"] for i in items), items)


@dataclass
class ActivationCheck:
    """One forward of perflab's model: what autograd saved, next to what the estimate predicts."""

    model: str
    batch: int
    seq: int
    heads: int
    hidden: int
    saved: SavedTensors
    parts: dict[str, Any]  # perflab.memory.estimate.model_activation_bytes
    predicted_bytes: int  # perflab.memory.estimate.activation_total(parts)

    def text(self) -> str:
        """The predicted and saved totals; the saved storages and the 4-byte scalar loss make up the prediction."""
        from perflab.core.readout import binary_bytes

        return (f"predicted {binary_bytes(self.predicted_bytes)}; saved by autograd {binary_bytes(self.saved.total_bytes)}"
                f" + the 4-byte loss = {self.saved.total_bytes + 4:,} bytes (predicted {self.predicted_bytes:,})")

    def parts_table(self):
        """The estimate's per-layer terms, in bytes."""
        import pandas as pd

        return pd.DataFrame([{"per layer": k, "bytes": f"{v:,}"} for k, v in self.parts["per_layer_detail"].items()])

    def by_shape(self, top: int = 12):
        """The largest saved storages, grouped by shape and dtype, with readable byte counts."""
        import pandas as pd

        df = self.saved.by_shape().head(top)
        return pd.DataFrame([{"shape": r["shape"], "dtype": r["dtype"], "storages": int(r["count"]),
                              "bytes each": f"{int(r['bytes_each']):,}", "bytes in all": f"{int(r['total_bytes']):,}"}
                             for r in df.to_dict("records")])

    def paper_table(self):
        """Korthikanti et al.'s layer (eq. 1, 16-bit activations, doubled for fp32) beside perflab's, per layer."""
        import pandas as pd

        from perflab.core.readout import num
        from perflab.memory.estimate import activations_per_layer_bytes

        paper = 2 * activations_per_layer_bytes(self.seq, self.batch, self.hidden, self.heads)
        ours = self.parts["per_layer"]
        return pd.DataFrame([{"per layer": "Korthikanti eq. 1, ×2 for fp32", "MiB": num(paper / 2**20, 4)},
                             {"per layer": "perflab's model (exact)", "MiB": num(ours / 2**20, 4)},
                             {"per layer": "difference (masks, s×s scores, minus LSE and norm stats)",
                              "MiB": num((paper - ours) / 2**20, 4)}])


def activation_check(cfg, batch: int, *, device=None, seed: int = 0) -> ActivationCheck:
    """Build `cfg`'s model, run one forward to the loss under `saved_tensors` (the parameters, buffers and the
    batch excluded), and put it beside `model_activation_bytes` for this device. The model is not kept."""
    import torch

    from perflab.core.device import pick_device
    from perflab.memory.estimate import activation_total, model_activation_bytes
    from perflab.workload.models import build_model
    from perflab.workload.train import make_batches, model_loss

    dev = pick_device(device) if device is None or isinstance(device, str) else torch.device(device)
    m = build_model(cfg, device=dev, seed=seed)
    data = make_batches(cfg, batch, cfg.seq_len, device=dev, seed=seed)[0]  # token ids and next-token targets
    _, saved = saved_tensors(lambda: model_loss(m, data), exclude=[*m.parameters(), *m.buffers(), *data])
    parts = model_activation_bytes(cfg, batch, device=dev.type)
    return ActivationCheck(cfg.name, int(batch), int(cfg.seq_len), int(cfg.heads), int(cfg.hidden), saved, parts,
                           activation_total(parts))
