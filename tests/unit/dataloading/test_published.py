"""Tests of `perflab.dataloading.published`."""



def test_published_figures_are_the_sources():
    from perflab.dataloading import published

    df = published.published_2x2()
    best = df.sort_values("avg_time_s").iloc[0]
    assert bool(best.pin_memory) and bool(best.non_blocking) and best.avg_time_s == 0.459  # A100 80GB PCIe
    assert published.published_workers().set_index("num_workers").avg_time_s[0] == 5.388
    assert published.lcg_story()["bottleneck_removed_fraction"] == 0.8
