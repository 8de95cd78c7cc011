"""The docs/quant.md recipe for an openpi (pi0-style) PyTorch policy: a Gemma transformer (pi0's
action expert is one; built from `transformers` config classes with random weights, standing in for
the checkpoint) quantized with the fork's variables, then compiled with fullgraph=True and
mode="reduce-overhead" — one graph, no recompiles, outputs equal to eager and close to FP32."""

import pytest
import torch

transformers = pytest.importorskip("transformers")

FORK_ENV = {
    "OPENPI_DUQUANT_WBITS_DEFAULT": "4",
    "OPENPI_DUQUANT_ABITS": "8",
    "OPENPI_DUQUANT_BLOCK": "64",
    "OPENPI_DUQUANT_INCLUDE": r".*(q_proj|k_proj|v_proj|o_proj|gate_proj|up_proj|down_proj)$",
    "OPENPI_DUQUANT_EXCLUDE": r"(?:^|\.)(norm|ln|emb|embed)(?:\.|$)",
}


def gemma_policy():
    torch.manual_seed(0)
    config = transformers.GemmaConfig(
        vocab_size=256,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=1,
        head_dim=32,
        max_position_embeddings=64,
    )
    return transformers.GemmaModel(config).eval()


def test_pi0_style_policy_quantizes_with_fork_variables_and_compiles_fullgraph():
    from torch._dynamo.utils import counters

    from accelkit.quant.config import load_config
    from accelkit.quant.method.convert import quantize_with_report
    from accelkit.quant.method.layers import QuantLinear

    fp32 = gemma_policy()
    model = gemma_policy()
    g = torch.Generator().manual_seed(1)
    calib = [
        {"inputs_embeds": torch.randn(2, 16, 128, generator=g), "use_cache": False}
        for _ in range(4)
    ]
    config = load_config(env=FORK_ENV, rotation_steps=16)
    model, report = quantize_with_report(model, config, calib)
    assert len(report.quantized) == 14  # 7 projections x 2 layers; norms and embeddings excluded
    assert all(isinstance(model.get_submodule(n), QuantLinear) for n in report.quantized)

    def policy(embeds):
        return model(inputs_embeds=embeds, use_cache=False).last_hidden_state

    torch._dynamo.reset()
    counters.clear()
    compiled = torch.compile(policy, fullgraph=True, mode="reduce-overhead")
    x = torch.randn(2, 16, 128, generator=g)
    with torch.no_grad():
        first = compiled(x).clone()
        again = compiled(torch.randn(2, 16, 128, generator=g)).clone()
        second = compiled(x).clone()
        eager = policy(x)
        ref = fp32(inputs_embeds=x, use_cache=False).last_hidden_state
    assert (
        counters["stats"]["unique_graphs"] == 1
    )  # one graph, no recompile for a new input of the same shape
    assert not torch.equal(first, again)
    torch.testing.assert_close(second, first, rtol=0, atol=0)
    torch.testing.assert_close(first, eager, rtol=1e-4, atol=1e-4)
    cos = torch.nn.functional.cosine_similarity(first.flatten(1), ref.flatten(1))
    assert cos.min() > 0.99
    assert not torch.allclose(first, ref, atol=1e-6)  # it is quantized, not the float model
