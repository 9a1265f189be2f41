"""perflab runs on torch 2.11 (the GPU box's) as well as 2.13 (the suite's): names torch added after
2.11 are only reached through getattr/hasattr, with the older name beside them (README, "GPU").

The list holds the additions found by reading torch's release notes and pull requests for 2.12 and
2.13 that perflab's code has a reason to call; a direct attribute access to one of them fails here."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# name → the torch release that added it, and what to use before it
NEWER_THAN_2_11 = {
    "all_gather_single": ("2.13", "all_gather_into_tensor"),  # pytorch/pytorch#186123
    "reduce_scatter_single": ("2.13", "reduce_scatter_tensor"),  # pytorch/pytorch#186123
    "gather_single": ("2.13", "gather_into_tensor"),  # pytorch/pytorch#191073
    "all_gather_single_coalesced": ("2.13", "all_gather_into_tensor_coalesced"),  # pytorch/pytorch#186144
    "reduce_scatter_single_coalesced": ("2.13", "reduce_scatter_tensor_coalesced"),  # pytorch/pytorch#186144
    "Graph": ("2.12", "torch.cuda.CUDAGraph"),  # torch.accelerator.Graph, PyTorch 2.12 release blog
    "is_capturing": ("2.12", "torch.cuda.is_current_stream_capturing"),  # torch.Stream.is_capturing, same
}


def _direct_uses(text: str) -> list[str]:
    """`x.name` accesses of the names above (a string such as getattr(dist, "name") is not one)."""
    code = re.sub(r"(\"\"\"|''')[\s\S]*?\1|\"[^\"\n]*\"|'[^'\n]*'|#[^\n]*", "", text)
    found = []
    for name in NEWER_THAN_2_11:
        for m in re.finditer(rf"(\w[\w.]*)\.{name}\b", code):
            if name == "Graph" and not m.group(1).endswith("accelerator"):
                continue
            found.append(f"{m.group(1)}.{name}")
    return found


def test_the_scanner_sees_a_direct_use_and_not_a_guarded_one():
    assert _direct_uses("ag = dist.all_gather_single\ng = torch.accelerator.Graph()") == \
        ["dist.all_gather_single", "torch.accelerator.Graph"]
    assert _direct_uses('ag = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor\n'
                        "# dist.reduce_scatter_single in a comment\ng = torch.cuda.CUDAGraph()") == []


def test_perflab_reaches_names_newer_than_torch_2_11_only_through_getattr():
    bad = {str(p.relative_to(ROOT)): uses for p in sorted((ROOT / "perflab").rglob("*.py"))
           if (uses := _direct_uses(p.read_text()))}
    assert not bad, f"torch names newer than 2.11, used directly (guard them with getattr/hasattr): {bad}"
