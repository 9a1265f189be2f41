"""The scan that keeps raw reprs and unrounded floats out of executed lessons catches what it must
and lets through what a person reads fine (versions, addresses, rounded numbers, torch modules)."""

from readout_scan import problems_in_text, scan, significant_digits

from perflab.core.readout import num


def test_it_flags_a_raw_dataclass_repr_and_a_long_float():
    assert problems_in_text("MatmulResult(m=512, n=512, k=512, median_s=0.0084730)")
    assert problems_in_text("0.0316812690461387 TFLOP/s")
    assert significant_digits("0.0316812690461387") == 15


def test_it_lets_readable_text_through():
    for ok in ("torch 2.13.0+cpu · Python 3.11.7", "127.0.0.1:8888", "arXiv:2205.05198", "0.0317 TFLOP/s",
               "Linear(in_features=128, out_features=512, bias=True)", "12,345.6 tokens/s"):
        assert not problems_in_text(ok), ok


def test_readout_numbers_pass_the_scan():
    for x in (0.0316812690461387, 123456.789, 1e-9 / 3):
        assert not problems_in_text(num(x))


def test_scan_names_the_cell():
    nb = {"cells": [{"cell_type": "code", "source": "print(x)\n", "metadata": {},
                     "outputs": [{"output_type": "stream", "name": "stdout", "text": "x = 3.14159265358979\n"}]}],
          "metadata": {}}
    found = scan(nb, "demo.ipynb")
    assert found and "demo.ipynb" in found[0]


def test_it_flags_an_object_repr_that_should_have_been_drawn_or_read():
    for bad in ("[<Figure size 800x180 with 1 Axes>, 'won back 68% of the step; parity kept']",
                "<function with_fixes at 0x7f3a2c1d0e50>", "<perflab.hunt.step.HuntStep object at 0x7f00aa>",
                "<bound method Panel.update of <perflab.course.widgets.Panel object at 0x7f1>>",
                "<built-in function len>"):
        assert any("object repr" in p for p in problems_in_text(bad)), bad
    for ok in ("<b>bold</b> is markup", "s < 64 > d", "a <= b"):
        assert not problems_in_text(ok), ok


def test_a_drawn_figure_is_not_its_repr():
    drawn = {"cells": [{"cell_type": "code", "source": "fig\n", "metadata": {},
                        "outputs": [{"output_type": "display_data", "metadata": {},
                                     "data": {"image/png": "iVBOR", "text/plain": "<Figure size 640x480 with 1 Axes>"}}]}],
             "metadata": {}}
    assert scan(drawn) == []
    printed = {"cells": [{"cell_type": "code", "source": "print(x)\n", "metadata": {},
                          "outputs": [{"output_type": "stream", "name": "stdout",
                                       "text": "[<Figure size 800x180 with 1 Axes>, 'won back 68%']\n"}]}],
               "metadata": {}}
    assert scan(printed, "14.ipynb") and "object repr" in scan(printed, "14.ipynb")[0]
