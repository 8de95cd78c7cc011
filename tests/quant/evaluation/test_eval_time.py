"""What `quant eval` spends no time on (issue 57, eval time that scales): calls whose result
nothing reads. Each test counts the work, never the seconds."""

import torch
from torch import nn

from accelkit.quant.evaluation.speed import Phases, SpeedBench


class Counted(nn.Module):
    """A small model that counts its calls."""

    def __init__(self, seed: int):
        super().__init__()
        torch.manual_seed(seed)
        self.lin = nn.Linear(8, 8)
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        return self.lin(x)


def test_fp32_warms_up_once_per_run_not_once_per_setting():
    fp32 = Counted(0)
    bench = SpeedBench(fp32, {"x": torch.randn(4, 8)}, Phases(), rounds=3)  # 3 rounds exactly
    first, second = Counted(1), Counted(2)
    bench.measure(first, compiled=False)
    assert (fp32.calls, first.calls) == (1 + 3, 1 + 3)  # a warm-up call each, then 3 rounds
    bench.measure(second, compiled=False)
    # the second setting warms up; FP32, already called on this batch, does not again
    assert (fp32.calls, second.calls) == (1 + 3 + 3, 1 + 3)
    bench.measure(first, compiled=False)  # a model measured again is warm too
    assert (fp32.calls, first.calls) == (1 + 3 + 3 + 3, 1 + 3 + 3)
