from __future__ import annotations

from kvbench.matrix.names import agentic_exp_name, fixed_exp_name, multinode_agentic_exp_name


def test_single_node_names():
    assert agentic_exp_name("qwen3.5", 2, 56, "dram", {"name": "hicache"}, "mtp") == \
        "qwen3.5_tp2_conc56_kvdram-hicache_spec-mtp"
    assert agentic_exp_name("glm5.2", 8, 4, "none", None, "none") == "glm5.2_tp8_conc4_kvnone"


def test_multinode_names_encode_topology():
    prefill = {"num-worker": 1, "tp": 8, "ep": 8, "dp-attn": True}
    decode = {"num-worker": 2, "tp": 4, "ep": 1, "dp-attn": False}
    assert multinode_agentic_exp_name("dsv4", prefill, decode, [16], "dram",
                                      {"name": "mooncake"}) == \
        "dsv4_p1x8ep8dpa_d2x4_conc16_kvdram-mooncake"
    assert multinode_agentic_exp_name("dsv4", prefill, decode, [16, 32], "none", None) == \
        "dsv4_p1x8ep8dpa_d2x4_conc16x32"


def test_fixed_names():
    assert fixed_exp_name("dsr1", 8192, 1024) == "dsr1_8k1k"
    assert fixed_exp_name("dsr1", 1024, 8192) == "dsr1_1024_8192"
