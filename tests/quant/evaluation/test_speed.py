"""`speed.compile_model`: regional compilation — a model's repeated blocks compile to one graph
per input shape, the compiled copy computes what the eager model computes, and the eager model
stays eager (its times are the eager rows)."""

import copy

import torch
from torch import nn
from torch._dynamo.utils import counters

from accelkit.quant.config import QuantConfig
from accelkit.quant.evaluation.speed import compile_model, repeated_blocks
from accelkit.quant.method.convert import quantize
from tests.support.quant_blocks import Block


class Stack(nn.Module):
    def __init__(self, depth=4, d=64):
        super().__init__()
        self.blocks = nn.ModuleList(Block(d, 128) for _ in range(depth))
        self.head = nn.Linear(d, 8)
        self.others = nn.ModuleList([nn.ReLU(), nn.Tanh()])  # two types: not a stack

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def _calibration():
    g = torch.Generator().manual_seed(0)
    return [torch.randn(4, 10, 64, generator=g) * torch.linspace(0.5, 8, 64) for _ in range(4)]


def test_repeated_blocks_finds_the_stack_and_only_a_stack():
    model = Stack()
    assert repeated_blocks(model) is model.blocks
    assert (
        repeated_blocks(Block(64, 128)) is None
    )  # no ModuleList of one type: the whole model compiles
    assert repeated_blocks(nn.Sequential(nn.Linear(2, 2), nn.ModuleList([nn.ReLU()]))) is None


def test_quantized_blocks_compile_once_per_shape_and_match_eager():
    torch.manual_seed(0)
    model = quantize(Stack().eval(), QuantConfig(block_size=32, rotation_steps=16), _calibration())
    before = {**dict(model.named_buffers()), **dict(model.named_parameters())}
    tensors = {name: t.detach().clone() for name, t in before.items()}
    torch._dynamo.reset()
    counters.clear()
    compiled = compile_model(model)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for shape in ((4, 10, 64), (1, 10, 64), (4, 10, 64)):
            x = torch.randn(*shape, generator=g) * 3
            got, want = compiled(x), model(x)
            assert torch.allclose(got, want, atol=1e-4, rtol=1e-4), (got - want).abs().max()
    # four blocks, two shapes: two graphs (a graph per block would be eight)
    assert counters["stats"]["unique_graphs"] == 2, dict(counters["stats"])
    # the eager model is untouched and shares its tensors with the compiled copy
    assert all(block._compiled_call_impl is None for block in model.blocks)
    assert all(block._compiled_call_impl is not None for block in compiled.blocks)
    mine = dict(compiled.named_buffers()) | dict(compiled.named_parameters())
    for name, tensor in before.items():
        assert mine[name] is tensor, name
        assert torch.equal(tensor, tensors[name])  # nothing written by compiling or running


def test_without_a_stack_the_whole_model_compiles():
    torch.manual_seed(0)
    model = Block(64, 128).eval()
    torch._dynamo.reset()
    compiled = compile_model(copy.deepcopy(model))
    x = torch.randn(3, 5, 64)
    with torch.no_grad():
        assert torch.allclose(compiled(x), model(x), atol=1e-5)
    assert isinstance(compiled, torch._dynamo.eval_frame.OptimizedModule)
