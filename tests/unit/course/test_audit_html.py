"""`perflab audit --html`: one standalone page read from the typed report, its figures embedded."""

from perflab.course.audit_html import render, roofline_figure, waterfall_figure, write_html
from tests.unit.audit.reports import made_up


def test_the_page_shows_every_part_of_the_report(tmp_path):
    page = write_html(made_up(), tmp_path / "audit.html").read_text()
    assert page.count("data:image/png;base64,") == 2 and "<script" not in page
    for words in ("made-up step on cpu: a test machine", "Time and utilization", "causal attention halved",
                  "not counted: mylib::fused_mlp, 2 call(s)", "Where the time goes", "aten::mm", "Graph breaks",
                  "model.py:12 in forward", "energy not measurable", "What to try", "1.3×", ">ok<",
                  "Where fp8 would pay", "on NVIDIA H100 SXM5 80GB (the GPU named)", ">8192×4096×4096<", ">fp8 pays<",
                  ">keep bf16<", "the step&#x27;s matmuls in all", "gtc22-whitepaper-hopper, H100 SXM5 column"):
        assert words in page, words


def test_the_fp8_section_says_why_nothing_was_predicted():
    from perflab.audit.fp8 import gains

    none = gains({(64, 64, 64): 1}, 2 * 64**3, None, "the audit ran on a CPU, which has no fp8 units")
    page = render(made_up(fp8=none))
    assert "Where fp8 would pay" in page and "no prediction: the audit ran on a CPU, which has no fp8 units" in page
    assert "Where fp8 would pay" not in render(made_up(fp8=None))


def test_no_breaks_read_and_no_rung_are_said():
    from perflab.audit.report import GraphBreaks

    page = render(made_up(breaks=GraphBreaks([], read=False), recommendations=[]))
    assert "<p>not read</p>" in page and "no rung of the capstone applies" in page
    assert "<p>none</p>" in render(made_up(breaks=GraphBreaks([])))


def test_the_figures_draw_the_waterfall_and_the_roofline():
    import matplotlib.pyplot as plt

    rep = made_up()
    fig = waterfall_figure(rep)
    legend = fig.axes[0].get_legend()
    assert legend is not None
    labels = [t.get_text() for t in legend.get_texts()]
    assert "launch overhead" in labels and "data wait" in labels
    fig2 = roofline_figure(rep)
    legend2 = fig2.axes[0].get_legend()
    assert legend2 is not None and any("aten::mm (compute-bound)" in t.get_text() for t in legend2.get_texts())
    plt.close(fig)
    plt.close(fig2)
