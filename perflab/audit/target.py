"""What `perflab audit` measures: the learner's own training step, from a factory or a Hugging Face config.

A factory is a function with no arguments that returns a dict (or an object with these attributes):

* `model`: an `nn.Module`;
* `batches`: a DataLoader or any iterable of batches (a dict of tensors, a tuple/list, or a tensor);
* `loss_fn(model, batch)` (optional): returns the scalar loss. Default: a Hugging Face model's own
  `.loss` (its `labels` set to its `input_ids` when the batch has none); for a batch `(inputs, targets)`
  the cross entropy of `model(inputs)` (mean squared error when the targets are floating point);
* `optimizer` (optional): default `torch.optim.AdamW(model.parameters())`;
* `tokens_per_batch` (optional): default the number of elements of the batch's `input_ids` (an
  encoder–decoder's `decoder_input_ids` or `labels` added), or of an `inputs` tensor of token ids (int64
  or int32, [batch, sequence]); without tokens (images, uint8 pixels included) the audit reports
  samples/s only.

`--hf-config TYPE_OR_PATH` builds the model from a configuration instead: a model type `transformers`
knows (its default config) or a local `config.json`, with overrides, random weights, and no network
(HF_HUB_OFFLINE is set before `transformers` is imported). Its batches are random token ids.
"""

from __future__ import annotations

import contextlib
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


FACTORY_TIMEOUT_S = 120.0  # how long a factory (its import and its call) may take before the audit gives up
PROGRESS_EVERY_S = 10.0


def from_factory(spec: str, *, timeout_s: float = FACTORY_TIMEOUT_S,
                 progress: Callable[[str], None] | None = None, device: str | None = None) -> Target:
    """Load 'path/to/file.py:FACTORY' or 'module:FACTORY', call it, and check what it returned. A factory
    (import included) that has not returned after `timeout_s` seconds is one line; while it runs,
    `progress` hears every PROGRESS_EVERY_S seconds how long it has waited. `device` (e.g. "meta", for
    `perflab plan`) is torch's default device while the factory runs, on the thread that runs it."""
    from perflab.compiler.breaks import load_factory, user_error

    if ":" not in spec or not spec.rpartition(":")[2] or not spec.rpartition(":")[0]:
        raise AuditInputError(f"TARGET wants path/to/file.py:FACTORY or module:FACTORY (got {spec!r}), "
                              "or use --hf-config TYPE_OR_PATH")
    user_file: list[str | None] = [None]

    def build():
        try:
            fac, user_file[0] = load_factory(spec)
        except InputError as e:
            raise AuditInputError(str(e).replace("--explain wants", "TARGET wants")) from None
        try:
            with torch.device(device) if device else contextlib.nullcontext():
                return fac()
        except Exception as exc:  # noqa: BLE001 - the learner's factory: its file, line and message
            raise user_error(exc, f"the factory {spec}", user_file[0]) from None

    built = call_within(build, f"the factory {spec}", timeout_s, progress)
    return target_from(built, spec, user_file[0])


def call_within(fn: Callable[[], Any], what: str, timeout_s: float, progress: Callable[[str], None] | None = None,
                every_s: float = PROGRESS_EVERY_S) -> Any:
    """`fn()`, run on a worker thread so that the caller can give up on it: its value, or its exception
    raised here; an `AuditInputError` of one line when it has not returned after `timeout_s` seconds (the
    thread is a daemon: it cannot be stopped, and it does not keep the process alive)."""
    import threading
    import time

    say = progress or (lambda _m: None)
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            box["error"] = exc

    worker = threading.Thread(target=run, name="perflab-audit-factory", daemon=True)
    t0 = time.monotonic()
    worker.start()
    while True:
        waited = time.monotonic() - t0
        worker.join(max(min(every_s, timeout_s - waited), 0.0))
        if not worker.is_alive():
            break
        waited = time.monotonic() - t0
        if waited >= timeout_s:
            raise AuditInputError(f"{what} did not return within {timeout_s:g} s (it may wait on a file, a network "
                                  "or a lock, or build something large): make it return sooner, or allow longer "
                                  "with --factory-timeout SECONDS")
        say(f"{what}: still running after {waited:.0f} s (gives up at {timeout_s:g} s)")
    if "error" in box:
        raise box["error"]
    return box.get("value")


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
        raise AuditInputError(f"cannot build a {kind} config with {raw}: {type(exc).__name__}: "
                              f"{' '.join(str(exc).split())}") from None


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


# the dtypes an embedding lookup takes (nn.Embedding wants int64 or int32): what token ids come in. A uint8,
# int8, int16 or bool tensor is pixels, a mask or labels, never token ids
INDEX_DTYPES = (torch.int64, torch.int32)


def looks_like_token_ids(t: Any) -> bool:
    """A [batch, sequence] tensor of an index dtype. Images (uint8, or 4-D), audio and features are not."""
    return isinstance(t, torch.Tensor) and t.dtype in INDEX_DTYPES and t.dim() == 2


def is_encoder_decoder(model: Any) -> bool:
    return bool(getattr(getattr(model, "config", None), "is_encoder_decoder", False))


def token_streams(batch: Any, model: Any = None) -> tuple[int, int] | None:
    """(encoder tokens, decoder tokens) of one batch of an encoder–decoder (a model whose config says
    `is_encoder_decoder`, as BART's and T5's do): the encoder reads `input_ids`; the decoder reads
    `decoder_input_ids`, else the shifted `labels` (as many), else, as `default_loss` sets labels to
    the input ids, as many as the encoder. None for any other model or batch."""
    if not is_encoder_decoder(model) or not isinstance(batch, Mapping):
        return None
    enc = batch.get("input_ids")
    if not isinstance(enc, torch.Tensor):
        return None
    dec = next((batch[k] for k in ("decoder_input_ids", "labels") if isinstance(batch.get(k), torch.Tensor)), enc)
    return int(enc.numel()), int(dec.numel())


def tokens_in(batch: Any, given: int | None = None, model: Any = None) -> int | None:
    """Tokens in one batch: `given`, else the elements of `input_ids` (both streams of an encoder–decoder,
    see `token_streams`), else of a first tensor that holds token ids (`looks_like_token_ids`). None for
    anything else: an image batch has samples, not tokens."""
    if given:
        return int(given)
    streams = token_streams(batch, model)
    if streams:
        return sum(streams)
    if isinstance(batch, Mapping) and isinstance(batch.get("input_ids"), torch.Tensor):
        return int(batch["input_ids"].numel())
    first = batch[0] if isinstance(batch, (tuple, list)) and batch else batch
    if isinstance(first, torch.Tensor) and looks_like_token_ids(first):
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
    when it runs out. A one-shot iterator (a generator, an `iter(...)`) cannot be: when it runs out before
    the audit has the `need` batches it draws, that is one line, never a silent replay of batches already
    seen (whose data wait would not be the pipeline's)."""

    def __init__(self, batches: Iterable[Any], need: int | None = None):
        self.batches = batches
        self._it: Iterator[Any] = iter(batches)
        self.one_shot = self._it is batches
        self.need = need
        self.given = 0

    def next(self) -> Any:
        try:
            b = next(self._it)
        except StopIteration:
            if not self.given:
                raise AuditInputError("the factory's batches gave no batch: the iterable is empty or already "
                                      "exhausted (return a fresh DataLoader or list, not a used iterator)") from None
            if self.one_shot:
                need = f" of the about {self.need} the audit draws" if self.need else ""
                raise AuditInputError(f"the factory's batches are a one-shot {type(self.batches).__name__} that ran "
                                      f"out after {self.given} batch(es){need}: a used batch is not replayed (its "
                                      "data wait would not be the pipeline's); return something that can be "
                                      "iterated again (a DataLoader, a list, or an object whose __iter__ starts a "
                                      "fresh generator)") from None
            self._it = iter(self.batches)
            try:
                b = next(self._it)
            except StopIteration:
                raise AuditInputError("the factory's batches gave no batch on a second pass: return an iterable "
                                      "that can be iterated again (a DataLoader or a list)") from None
        self.given += 1
        return b
