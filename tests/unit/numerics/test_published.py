"""The published fp8 figures as their sources state them."""

from perflab.numerics import published


def test_the_figures_the_lesson_shows():
    got = {f.id: (f.value, f.value_high) for f in published.figures()}
    assert got == {"torchao_8gpu_8b": (1.25, None), "torchao_512gpu_405b": (1.5, None),
                   "rowwise_2k_h200": (1.34, 1.43), "mxfp8_b200": (1.28, None)}
    assert published.figure("rowwise_2k_h200").shown() == "1.34–1.43×"


def test_every_figure_and_recipe_has_a_source():
    for item in (*published.figures(), *published.recipes()):
        assert item.source.url.startswith("https://") and item.source.title and item.source.section
    assert "3.3" in published.recipe("deepseek_v3").source.section and "2412.19437" in published.recipe("deepseek_v3").source.url
    assert "2209.05433" in published.recipe("hybrid_fp8").source.url


def test_the_tables():
    t = published.PublishedTable()
    assert t.table().shape == (4, 4) and t.recipes_table().shape == (2, 1)
