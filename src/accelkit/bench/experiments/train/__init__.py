"""`bench train`: the tutorial's MLP with BatchNorm and Dropout in PyTorch, Flax and Keras 3.

Data: a binary classification task generated offline (scikit-learn `make_classification`, fixed
seed, 100 features), split 80/20 by class, standardized with the training set's statistics.
Model: 100 → 300 → 200 → 100 → 1; every hidden layer is Linear → BatchNorm → ReLU → Dropout,
the output one logit (binary cross-entropy on logits), SGD with momentum at a constant rate.

What it shows, each with a check:
- **One start.** Flax's parameters *and* batch statistics, and Keras's weights, are copied from the
  freshly initialized PyTorch model; eval-mode logits agree before training.
- **BatchNorm state.** Flax keeps running statistics in a separate `batch_stats` collection:
  training applies the model with `mutable=["batch_stats"]` and stores what comes back in a
  `TrainState` subclass (fields `batch_stats`, `loss`, `metric`); evaluation uses
  `use_running_average=True`. A lockstep run (dropout off, the same batches) checks the losses and
  the running means/variances across frameworks after the same steps. PyTorch folds Bessel's
  correction n/(n−1) into its running variance and Flax/Keras do not; with both EMAs starting at 1
  the relation is exact: v_torch − m^t = n/(n−1)·(v_flax − m^t), m = 0.9, t steps.
- **Training.** One `DataLoader` (seeded sampler, reseeded each epoch) feeds every framework;
  per-epoch time with compilation reported apart (`jit(...).lower().compile()` for Flax; Keras's
  first epoch holds its own), loss and test accuracy per epoch; final accuracies agree within
  `accuracy_tolerance(n_test)` points (5, wider on small test sets: dropout masks differ between
  frameworks, so they agree only statistically).
- **FLOPs.** `nn.tabulate(..., compute_flops=True, compute_vjp_flops=True)` for the Flax model and
  `torch.utils.flop_counter.FlopCounterMode` for PyTorch, both against 2·B·in·out per dense layer
  (XLA also counts the bias add, B·out; PyTorch's counter counts matrix products only).
- **Checkpoints.** At epoch `checkpoint_epoch` PyTorch saves model, optimizer and RNG state with
  `torch.save`, Flax its whole `TrainState` with orbax-checkpoint; a fresh process restores both
  and continues; its per-step losses must equal the uninterrupted run's bit for bit (CPU).
- **Multi-device eval.** A child process with 8 virtual CPU devices restores the final Flax state
  and evaluates the test set with `pmap` + `pmean`, with `jit` on a batch-sharded array, and on one
  device: the same number of correct predictions.
- **Keras 3.** The backend is fixed when keras is imported, so keras-jax and keras-torch each run
  in their own child process (`KERAS_BACKEND`), same weights, same batches.

Laid out by concern: `config` (the model's shape, `Setup`), `data` (generated data, one
DataLoader), `models` (the MLP three times and its weights in each layout), `loops` (a training
loop per framework), `checkpoints`, `flops`, `devices` (multi-device evaluation), `checks` (what
the frameworks must agree on), `experiment` (`run`: all of it in order), `child` (what the child
processes run) and `shared` (what `bench mnist` uses too: the stratified split, the one DataLoader
pipeline, how an epoch is recorded).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from accelkit.runtime.exports import lazy_exports

if TYPE_CHECKING:  # the public names, listed once (runtime/exports.py reads them)
    from accelkit.bench.experiments.train.config import MODES as MODES
    from accelkit.bench.experiments.train.config import Setup as Setup
    from accelkit.bench.experiments.train.experiment import run as run

__getattr__, __dir__, __all__ = lazy_exports(__name__)
