"""What `perflab audit` measures: the learner's own training step, from a factory or a Hugging Face config.

A factory is a function with no arguments that returns a dict (or an object with these attributes):

* `model`: an `nn.Module`;
* `batches`: a DataLoader or any iterable of batches (a dict of tensors, a tuple/list, or a tensor);
* `loss_fn(model, batch)` (optional): returns the scalar loss. Default: a Hugging Face model's own
  `.loss` (its `labels` set to its `input_ids` when the batch has none); for a batch `(inputs, targets)`
  the cross entropy of `model(inputs)` (mean squared error when the targets are floating point);
* `optimizer` (optional): default `torch.optim.AdamW(model.parameters())`;
* `tokens_per_batch` (optional): default the number of elements of the batch's `input_ids`
  (or of an integer `inputs` tensor); without tokens the audit reports samples/s only.

`--hf-config TYPE_OR_PATH` builds the model from a configuration instead: a model type `transformers`
knows (its default config) or a local `config.json`, with overrides, random weights, and no network
(HF_HUB_OFFLINE is set before `transformers` is imported). Its batches are random token ids.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from perflab.core.errors import InputError


class AuditInputError(InputError):
    """Something about the learner's step that cannot be audited; the message says what to change."""


@dataclass
class Target:
    """One training step to audit: a model, where its batches come from, and how its loss is made."""

    name: str
    model: torch.nn.Module
    batches: Iterable[Any]
    loss_fn: Callable[[torch.nn.Module, Any], torch.Tensor] | None = None
    optimizer: torch.optim.Optimizer | None = None
    tokens_per_batch: int | None = None
    user_file: str | None = None
    hf_config: Any = None  # the transformers config, when the model has one
    notes: list[str] = field(default_factory=list)


FIELDS = ("model", "batches", "loss_fn", "optimizer", "tokens_per_batch")
EXPECTED = ("a dict (or an object) with 'model' (an nn.Module) and 'batches' (a DataLoader or any iterable of "
            "batches), and optionally 'loss_fn(model, batch)', 'optimizer', 'tokens_per_batch'")


def from_factory(spec: str) -> Target:
    """Load 'path/to/file.py:FACTORY' or 'module:FACTORY', call it, and check what it returned."""
    from perflab.compiler.breaks import load_factory, user_error

    if ":" not in spec or not spec.rpartition(":")[2] or not spec.rpartition(":")[0]:
        raise AuditInputError(f"TARGET wants path/to/file.py:FACTORY or module:FACTORY (got {spec!r}), "
                              "or use --hf-config TYPE_OR_PATH")
    try:
        fac, user_file = load_factory(spec)
    except InputError as e:
        raise AuditInputError(str(e).replace("--explain wants", "TARGET wants")) from None
    try:
        built = fac()
    except Exception as exc:  # noqa: BLE001 - the learner's factory: its file, line and message
        raise user_error(exc, f"the factory {spec}", user_file) from None
    return target_from(built, spec, user_file)


def target_from(built: Any, name: str = "factory", user_file: str | None = None) -> Target:
    """A `Target` from what a factory returned (a dict or an object with the contract's fields)."""
    def get(k: str) -> Any:
        return built.get(k) if isinstance(built, Mapping) else getattr(built, k, None)

    unknown = sorted(set(map(str, built)) - set(FIELDS)) if isinstance(built, Mapping) else []
    model, batches = get("model"), get("batches")
    if model is None or batches is None:
        got = f"a dict with keys {sorted(map(str, built))}" if isinstance(built, Mapping) else f"a {type(built).__name__}"
        raise AuditInputError(f"the factory {name} returned {got}: expected {EXPECTED}")
    if not isinstance(model, torch.nn.Module):
        raise AuditInputError(f"the factory {name} returned a model of type {type(model).__name__}: expected an "
                              "nn.Module")
    if isinstance(batches, (torch.Tensor, str, bytes)) or not isinstance(batches, Iterable):
        raise AuditInputError(f"the factory {name} returned batches of type {type(batches).__name__}: expected a "
                              "DataLoader or an iterable of batches (a list of dicts, tuples or tensors)")
    loss_fn, opt, tokens = get("loss_fn"), get("optimizer"), get("tokens_per_batch")
    if loss_fn is not None and not callable(loss_fn):
        raise AuditInputError(f"the factory {name} returned a loss_fn of type {type(loss_fn).__name__}: expected "
                              "a function loss_fn(model, batch) that returns a scalar tensor")
    if opt is not None and not isinstance(opt, torch.optim.Optimizer):
        raise AuditInputError(f"the factory {name} returned an optimizer of type {type(opt).__name__}: expected a "
                              "torch.optim.Optimizer over the model's parameters")
    if tokens is not None and (isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 1):
        raise AuditInputError(f"the factory {name} returned tokens_per_batch={tokens!r}: expected a whole number ≥ 1")
    t = Target(name, model, batches, loss_fn, opt, tokens, user_file, getattr(model, "config", None))  # pyright: ignore[reportArgumentType]  # checked callable above
    if unknown:
        t.notes.append(f"ignored factory keys: {', '.join(unknown)}")
    return t


# ---------------------------------------------------------------- Hugging Face configs


def parse_overrides(items: Iterable[str] | None) -> dict[str, Any]:
    """['n_layer=4', 'n_embd=256', 'tie_word_embeddings=false'] -> {'n_layer': 4, ...}; values parsed as JSON
    where they can be (numbers, true/false, null, lists), else kept as strings."""
    out: dict[str, Any] = {}
    for item in items or ():
        key, sep, value = str(item).partition("=")
        if not sep or not key.strip():
            raise AuditInputError(f"--hf-set wants KEY=VALUE pairs (e.g. n_layer=4), got {item!r}")
        v = value.strip()
        try:
            out[key.strip()] = json.loads(v.lower() if v.lower() in ("true", "false", "null") else v)
        except json.JSONDecodeError:
            out[key.strip()] = v
    return out


def _transformers():
    os.environ["HF_HUB_OFFLINE"] = "1"  # never a download: a config is built here, never fetched
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    from perflab.core.extras import need

    return need("transformers", "audit", "perflab audit --hf-config builds Hugging Face models")


def hf_config(type_or_path: str, overrides: Mapping[str, Any] | None = None):
    """A transformers config: `CONFIG_MAPPING[type](**overrides)`, or a local config.json (a file, or a
    folder holding one) with the overrides applied. Never touches the network."""
    tr = _transformers()
    text = str(type_or_path)
    looks_like_path = text.endswith(".json") or os.sep in text or text.startswith(".") or Path(text).exists()
    if looks_like_path:
        path = Path(text)
        if path.is_dir():
            path = path / "config.json"
        if not path.is_file():
            raise AuditInputError(f"no config file at {path} (a local config.json is read; nothing is downloaded)")
        try:
            raw = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as e:
            raise AuditInputError(f"{path} is not a readable JSON config: {e}") from None
        if not isinstance(raw, dict) or "model_type" not in raw:
            raise AuditInputError(f"{path} has no 'model_type': expected a Hugging Face config.json")
        kind = raw.pop("model_type")
        raw.update(overrides or {})
    else:
        kind, raw = text, dict(overrides or {})
    mapping = tr.CONFIG_MAPPING
    if kind not in mapping:
        near = sorted(k for k in mapping.keys() if k.startswith(kind[:3]))[:6]
        raise AuditInputError(f"transformers does not know the model type {kind!r}"
                              + (f" (near: {', '.join(near)})" if near else "") + ": give a model type such as gpt2, "
                              "llama, mixtral, or a path to a config.json")
    try:
        return mapping[kind](**raw)
    except Exception as exc:  # noqa: BLE001 - a bad override: one line
        raise AuditInputError(f"cannot build a {kind} config with {raw}: {type(exc).__name__}: {exc}") from None


def from_hf_config(type_or_path: str, overrides: Mapping[str, Any] | None = None, *, batch: int = 2, seq: int = 64,
                   n_batches: int = 16, seed: int = 0) -> Target:
    """A `Target` with `AutoModelForCausalLM.from_config` (random weights) fed random token batches."""
    tr = _transformers()
    cfg = hf_config(type_or_path, overrides)
    torch.manual_seed(seed)
    try:
        model = tr.AutoModelForCausalLM.from_config(cfg)
    except Exception as exc:  # noqa: BLE001 - transformers says why (e.g. no causal-LM head for this type)
        raise AuditInputError(f"cannot build a causal language model from the {cfg.model_type} config: "
                              f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}") from None
    vocab = int(getattr(cfg, "vocab_size", 0) or 0)
    if vocab < 2:
        raise AuditInputError(f"the {cfg.model_type} config has no vocab_size: cannot make token batches")
    limit = getattr(cfg, "max_position_embeddings", None) or getattr(cfg, "n_positions", None)
    if limit and seq > int(limit):
        raise AuditInputError(f"--seq {seq} is longer than the model's {limit} positions: choose --seq ≤ {limit}")
    g = torch.Generator().manual_seed(seed)
    batches = [{"input_ids": torch.randint(0, vocab, (batch, seq), generator=g)} for _ in range(n_batches)]
    name = f"{cfg.model_type} from its config" + (f" ({', '.join(f'{k}={v}' for k, v in (overrides or {}).items())})"
                                                   if overrides else "")
    return Target(name, model, batches, None, None, batch * seq, None, cfg)


# ---------------------------------------------------------------- batches and the loss


def to_device(batch: Any, device: torch.device) -> Any:
    """The batch with every tensor moved to `device` (dicts, tuples, lists and tensors; the rest as is)."""
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=True)
    if isinstance(batch, Mapping):
        return {k: to_device(v, device) for k, v in batch.items()}
    if isinstance(batch, (tuple, list)):
        return type(batch)(to_device(v, device) for v in batch) if isinstance(batch, list) else \
            tuple(to_device(v, device) for v in batch)
    return batch


def tokens_in(batch: Any, given: int | None = None) -> int | None:
    """Tokens in one batch: `given`, else the elements of `input_ids` (or of an integer first tensor)."""
    if given:
        return int(given)
    if isinstance(batch, Mapping) and isinstance(batch.get("input_ids"), torch.Tensor):
        return int(batch["input_ids"].numel())
    first = batch[0] if isinstance(batch, (tuple, list)) and batch else batch
    if isinstance(first, torch.Tensor) and not first.is_floating_point() and first.dim() >= 2:
        return int(first.numel())
    return None


def samples_in(batch: Any) -> int | None:
    """Samples in one batch: the first dimension of its first tensor."""
    if isinstance(batch, torch.Tensor):
        return int(batch.shape[0]) if batch.dim() else None
    vals = list(batch.values()) if isinstance(batch, Mapping) else list(batch) if isinstance(batch, (tuple, list)) else []
    for v in vals:
        n = samples_in(v)
        if n:
            return n
    return None


def default_loss(model: torch.nn.Module, batch: Any) -> torch.Tensor:
    """The loss when the factory gives none (see the module docstring)."""
    import torch.nn.functional as F

    if isinstance(batch, Mapping):
        kw = dict(batch)
        if "labels" not in kw and "input_ids" in kw and hasattr(model, "config"):
            kw["labels"] = kw["input_ids"]
        out = model(**kw)
        loss = getattr(out, "loss", None)
        if loss is None and isinstance(out, Mapping):
            loss = out.get("loss")
        if loss is None:
            raise AuditInputError("the model's output has no .loss for this batch: give the factory a "
                                  "loss_fn(model, batch)")
        return loss
    if isinstance(batch, (tuple, list)) and len(batch) == 2:
        x, y = batch
        out = model(x)
        loss = getattr(out, "loss", None)
        if loss is not None:
            return loss
        logits = getattr(out, "logits", out)
        if not isinstance(logits, torch.Tensor) or not isinstance(y, torch.Tensor):
            raise AuditInputError("cannot make a loss from this batch and output: give the factory a "
                                  "loss_fn(model, batch)")
        if y.is_floating_point():
            return F.mse_loss(logits.float(), y.float())
        return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), y.reshape(-1))
    out = model(batch)
    loss = getattr(out, "loss", None)
    if loss is None:
        raise AuditInputError("the batch is neither a dict nor (inputs, targets) and the output has no .loss: give "
                              "the factory a loss_fn(model, batch)")
    return loss


class BatchSource:
    """Batches on demand from the learner's iterable: a re-iterable (a DataLoader, a list) is started again
    when it runs out; a one-shot iterator (a generator) is replayed from the batches it gave."""

    def __init__(self, batches: Iterable[Any], keep: int = 32):
        self.batches = batches
        self._it: Iterator[Any] = iter(batches)
        self.one_shot = self._it is batches
        self.seen: list[Any] = []
        self.keep = keep
        self._replay = 0
        self.exhausted = False

    def next(self) -> Any:
        if self.exhausted:
            b = self.seen[self._replay % len(self.seen)]
            self._replay += 1
            return b
        try:
            b = next(self._it)
        except StopIteration:
            if not self.seen:
                raise AuditInputError("the factory's batches gave no batch: the iterable is empty or already "
                                      "exhausted (return a fresh DataLoader or list, not a used iterator)") from None
            if self.one_shot:
                self.exhausted = True
                return self.next()
            self._it = iter(self.batches)
            try:
                b = next(self._it)
            except StopIteration:
                raise AuditInputError("the factory's batches gave no batch on a second pass: return an iterable "
                                      "that can be iterated again (a DataLoader or a list)") from None
        if len(self.seen) < self.keep:
            self.seen.append(b)
        return b
