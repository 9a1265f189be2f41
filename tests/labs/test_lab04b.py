"""Lab 04b: its checks accept the reference answer and reject each plausible mistake with a hint."""

from __future__ import annotations

import pytest

from perflab.gemm import (
    lab04b,
)
from perflab.gemm import triton_matmul as tm
from perflab.grading.checks import LabCheckError


def _row(**kw):
    base = {"config": "128x128x64 w4 s3", "registers": 168, "spill_bytes": 0, "shared_bytes": 98304,
            "tensor_cores": "wgmma", "cannot_run": None, "tile_area": 16384, "blocks_per_sm": 2, "occupancy": 0.125,
            "limited_by": "shared memory", "tiles": 264, "waves": 1, "wave_efficiency": 1.0, "tile_efficiency": 1.0,
            "utilization": 1.0}
    return lab04b.ConfigRow(**{**base, **kw})


pytestmark = pytest.mark.skipif(not tm.available(), reason=f"{tm.unavailable_reason()}")


def cfg(bm, bn, bk, w, s):
    return dict(block_m=bm, block_n=bn, block_k=bk, num_warps=w, num_stages=s)


MUTANTS = [
    (cfg(96, 128, 64, 8, 3), "power of two"),                  # a tile size people use in CUDA C, not here
    (cfg(256, 256, 64, 8, 4), "cannot run.*256 KiB of shared memory.*227 KiB"),  # too many stages of a big tile
    (cfg(64, 64, 32, 8, 3), "under 128×128"),                  # high occupancy, but reads A and B twice as often
    (cfg(128, 256, 32, 4, 3), "spills"),                       # 32768 accumulators over 128 threads
    (cfg(32, 512, 32, 8, 3), "mma.sync"),                      # a tall-thin tile: no wgmma
    (cfg(128, 256, 64, 8, 3), "wastes part of a wave.*useful share 50"),  # 6 columns of 256 for 1408: a half-empty wave
    (cfg(64, 256, 64, 8, 3), "wastes part of a wave.*blocks per SM: 1"),  # 128×128's area, but 288 tiles in 3 waves
    (cfg(128, 256, 64, 8, 5), "cannot run.*240 KiB of shared memory"),  # five 48 KiB stages: over the block's limit
    ({"block_m": 128, "block_n": 128}, "no block_k"),          # forgot fields
]


def test_lab04b_config_that_cannot_run(monkeypatch):
    why = "255 registers × 1024 threads is over the 65536 registers a block may hold on NVIDIA H100 SXM5 80GB"
    monkeypatch.setattr(lab04b, "evaluate", lambda configs, p=None: [_row(cannot_run=why)])
    monkeypatch.setattr(lab04b, "best_of_search", lambda p=None: _row())
    cfg = dict(block_m=128, block_n=128, block_k=64, num_warps=4, num_stages=3)
    with pytest.raises(LabCheckError, match=f"compiled, but it does not fit an SM of h100-sxm: {why}"):
        lab04b.grade_config(cfg)


def test_lab04b_lower_occupancy_passes_and_a_wasted_wave_names_the_blocks_per_sm(monkeypatch):
    best = _row(config="128x128x64 w8 s3", blocks_per_sm=2, occupancy=0.25)
    monkeypatch.setattr(lab04b, "best_of_search", lambda p=None: best)
    cfg = dict(block_m=128, block_n=128, block_k=64, num_warps=4, num_stages=3)
    low = _row(blocks_per_sm=1, occupancy=0.0625, limited_by="registers", waves=2)
    monkeypatch.setattr(lab04b, "evaluate", lambda configs, p=None: [low])
    assert lab04b.grade_config(cfg).mine.occupancy == 0.0625  # a diagnostic, not a grade
    half = _row(blocks_per_sm=1, tiles=144, waves=2, wave_efficiency=0.545, utilization=0.545)
    monkeypatch.setattr(lab04b, "evaluate", lambda configs, p=None: [half])
    with pytest.raises(LabCheckError, match=r"wastes part of a wave: useful share 54.5 % \(144 tiles in 2 wave\(s\).*"
                                            r"blocks per SM: 1 for yours"):
        lab04b.grade_config(cfg)


def test_lab04b_answer_that_is_not_a_dict():
    with pytest.raises(LabCheckError, match="pick_config should return a dict with block_m, block_n, block_k, "
                                            "num_warps, num_stages, not list"):
        lab04b.check_config_choice(lambda **kw: [128, 128, 64, 8, 3])


def test_the_best_of_the_search_passes_and_a_stub_waits():
    from perflab.gemm import lab04b as lab

    best = lab.best_of_search()
    assert best.spill_bytes == 0 and best.utilization is not None and best.utilization > 0.9
    assert best.tensor_cores == "wgmma"
    res = lab.grade_config(cfg(128, 128, 64, 8, 3))
    assert res.mine.utilization is not None and res.mine.utilization >= best.utilization - lab.UTILIZATION_SLACK

    def stub(**kw):
        raise NotImplementedError

    assert lab.check_config_choice(stub) is False
    assert lab.check_config_choice(lambda **kw: cfg(128, 128, 64, 8, 3)) is True
    table = lab.compare_table(res)
    assert list(table.columns) == ["your config", "best of the search"]


def test_occupancy_is_a_diagnostic_not_a_grade():
    """One block per SM is defensible for a Tensor Core GEMM: 4 stages (1 block/SM, 2 full waves) passes
    beside 3 stages (2 blocks/SM, 1 wave), and so does lesson 04's worked example, 128×128×64 with 4 warps
    and 3 stages at 12.5 % occupancy."""
    from perflab.gemm import lab04b as lab

    four = lab.grade_config(cfg(128, 128, 64, 8, 4)).mine
    three = lab.grade_config(cfg(128, 128, 64, 8, 3)).mine
    assert (four.blocks_per_sm, four.waves, three.blocks_per_sm, three.waves) == (1, 2, 2, 1)
    assert four.utilization == three.utilization == 1.0
    lesson = lab.grade_config(cfg(128, 128, 64, 4, 3)).mine
    assert lesson.occupancy == 0.125 and lesson.spill_bytes == 0
    assert lab.check_config_choice(lambda **kw: cfg(128, 128, 64, 8, 4)) is True


@pytest.mark.parametrize(("config", "said"), MUTANTS, ids=[str(tuple(c.values())) for c, _ in MUTANTS])
def test_plausible_wrong_picks_are_refused_with_a_reason(config, said):
    from perflab.gemm import lab04b as lab

    with pytest.raises(LabCheckError, match=said):
        lab.grade_config(config)
