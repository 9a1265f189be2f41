"""Tests of `perflab.attention.panel`: lesson 13's panel."""

from perflab.attention import panel as attention_panel
from tests.unit.gemm.helpers import needs_triton


@needs_triton
def test_the_panel_draws_predicted_against_counted_bytes():
    fig, table, text = attention_panel.attention(seq=64, block_m=32, block_n=32, causal=True, compile_kernel=False)
    assert (table["flash_counted"] == table["flash_predicted"]).all() and len(table) == 3
    assert (table["standard_predicted"] > table["flash_predicted"]).all()
    assert "counted" in text and fig.axes[0].get_xlabel() == "sequence length s"
