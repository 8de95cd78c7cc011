"""quantize() selection and bad input, openpi env aliases, save/load bit-exactness and size."""

import copy

import pytest
import torch
from torch import nn

from accelkit.errors import ConfigError, DataError, InputError
from accelkit.quant.config import QuantConfig, load_config
from accelkit.quant.method.convert import quantize, quantize_with_report
from accelkit.quant.method.layers import QuantLinear
from accelkit.quant.method.storage import load_quantized, save_quantized
from tests.support.quant_blocks import SMALL, batches, make_net


def test_selection_globs_and_indivisible_layer_is_reported():
    model, report = quantize_with_report(
        make_net(), QuantConfig(**SMALL, exclude=["odd"]), batches()
    )
    assert set(report.quantized) == {"encoder.q", "encoder.up", "down"}
    assert (
        "narrow" in report.skipped and "not divisible by block_size 64" in report.skipped["narrow"]
    )
    assert type(model.odd) is nn.Linear and type(model.narrow) is nn.Linear
    with pytest.raises(ConfigError, match="narrow"):
        quantize(make_net(), QuantConfig(**SMALL, indivisible="error"), batches())


def test_batch_conventions_tuple_and_dict():
    tup = [(x, torch.tensor(2.0)) for x in batches()]
    dic = [{"x": x, "scale": torch.tensor(2.0)} for x in batches()]
    a = quantize(make_net(), QuantConfig(**SMALL, include=["encoder.*"]), tup)
    b = quantize(make_net(), QuantConfig(**SMALL, include=["encoder.*"]), dic)
    x = batches(1)[0]
    assert torch.equal(a(x), b(x))


def test_bad_inputs_name_the_problem():
    with pytest.raises(InputError, match=r"candidates: encoder\.q, encoder\.up, down"):
        quantize(make_net(), QuantConfig(include=["nothing*"]), batches())
    with pytest.raises(DataError, match="empty"):
        quantize(make_net(), QuantConfig(**SMALL), [])
    bad = batches()
    bad[1][3, 4] = float("nan")
    with pytest.raises(DataError, match=r"batch 1.*'encoder\.q'.*NaN"):
        quantize(make_net(), QuantConfig(**SMALL), bad)
    done = quantize(make_net(), QuantConfig(**SMALL, include=["down"]), batches())
    with pytest.raises(InputError, match="already quantized"):
        quantize(done, QuantConfig(**SMALL), batches())
    for bits in (1, 9, 12):
        with pytest.raises(ConfigError, match=r"2\.\.8, or 16"):
            QuantConfig(wbits=bits)
    with pytest.raises(ConfigError, match="abits"):
        load_config(abits=0)


def test_openpi_env_aliases_keep_the_forks_meaning_and_precedence():
    """The fork's variables mean what they meant there: WBITS_DEFAULT the bits, WBITS bits per
    layer, INCLUDE/EXCLUDE regexes searched in the name, ABITS=0 off, LS the smoothing strength,
    DRYRUN a plan only; ACCELKIT_QUANT_* and arguments sit above them."""
    env = {
        "OPENPI_DUQUANT_WBITS_DEFAULT": "8",
        "OPENPI_DUQUANT_WBITS": "encoder.up:6",
        "OPENPI_DUQUANT_ABITS": "0",
        "OPENPI_DUQUANT_BLOCK": "64",
        "OPENPI_DUQUANT_SCOPE": "encoder.",
        "OPENPI_DUQUANT_INCLUDE": r"\.(q|up)$",
        "OPENPI_DUQUANT_EXCLUDE": r"^encoder\.q$",
        "OPENPI_DUQUANT_PERMUTE": "0",
        "OPENPI_DUQUANT_LS": "0.15",
        "OPENPI_DUQUANT_ROW_ROT": "disabled",
        "OPENPI_DISABLE_TORCH_COMPILE": "1",
    }
    cfg = load_config(env=env)
    assert (cfg.wbits, cfg.abits, cfg.block_size, cfg.scope) == (8, 16, 64, "encoder.")
    assert cfg.layer_wbits == {"encoder.up": 6} and cfg.permutation is False
    assert cfg.smooth_alpha == 0.15 and cfg.disable_compile and not cfg.dry_run
    assert load_config(env={**env, "ACCELKIT_QUANT_WBITS_DEFAULT": "3"}).wbits == 8  # not ours
    assert load_config(env={**env, "ACCELKIT_QUANT_WBITS": "3"}).wbits == 3
    assert load_config(env=env, wbits=2).wbits == 2
    model, report = quantize_with_report(
        make_net(), load_config(env=env, rotation_steps=8), batches()
    )
    assert report.quantized == ["encoder.up"]  # the regexes chose it; the glob default is "*"
    up = model.encoder["up"]
    assert isinstance(up, QuantLinear) and (up.spec.wbits, up.spec.abits) == (6, 16)
    plan = load_config(env={**env, "OPENPI_DUQUANT_DRYRUN": "1"})
    net = make_net()
    same, report = quantize_with_report(net, plan, batches())
    assert same is net and report.planned == {"encoder.up": 6} and not report.quantized
    assert not any(isinstance(m, QuantLinear) for m in net.modules())


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"OPENPI_DUQUANT_WBITS_DEFAULT": "five"}, r"^OPENPI_DUQUANT_WBITS_DEFAULT 'five': "),
        ({"OPENPI_DUQUANT_WBITS": "8"}, r"^OPENPI_DUQUANT_WBITS '8': entry '8' is not name:bits"),
        ({"OPENPI_DUQUANT_WBITS": "down:9"}, r"wbits of down=9 is not supported"),
        ({"OPENPI_DUQUANT_INCLUDE": "("}, r"^OPENPI_DUQUANT_INCLUDE '\(': is not a valid regular"),
        ({"OPENPI_DUQUANT_ROW_ROT": "restore"}, r"no output-side row rotation"),
        (
            {"OPENPI_DUQUANT_ACT_PCT": "99.9"},
            r"^OPENPI_DUQUANT_ACT_PCT is not supported: .*ACT_CLIP",
        ),
        ({"OPENPI_DUQUANT_CALIB_STEPS": "8"}, r"CALIBRATION_ROWS"),
        ({"OPENPI_DUQUANT_PACKDIR": "/tmp/p"}, r"--output FILE"),
    ],
)
def test_openpi_variables_without_a_meaning_here_are_refused(env, message):
    with pytest.raises(ConfigError, match=message):
        load_config(env=env)


def test_openpi_leftovers_warn_and_bad_layer_names_fail(caplog):
    with caplog.at_level("WARNING"):
        load_config(env={"OPENPI_DUQUANT_DEBUG": "1"})
    assert "ignoring OPENPI_DUQUANT_DEBUG" in caplog.text
    with pytest.raises(InputError, match=r"per-layer bits name 'encoder\.qq'"):
        quantize(make_net(), QuantConfig(**SMALL, layer_wbits={"encoder.qq": 8}), batches())
    with pytest.raises(InputError, match="include_regex='nothing'"):
        quantize(make_net(), QuantConfig(**SMALL, include_regex="nothing"), batches())


@pytest.mark.parametrize("method", ["duquant", "rtn"])
def test_save_load_bit_exact_and_small(tmp_path, method):
    cfg = QuantConfig(
        method=method, wbits=4, abits=8, weight_group_size=None, exclude=["narrow", "odd"], **SMALL
    )
    model = quantize(make_net(), cfg, batches())
    path = save_quantized(model, tmp_path / "q.safetensors")
    loaded = load_quantized(path, make_net)
    assert isinstance(loaded.down, QuantLinear) and type(loaded.odd) is nn.Linear
    x = batches(1)[0]
    with torch.no_grad():
        assert torch.equal(model(x), loaded(x))
    for (ka, va), (kb, vb) in zip(
        sorted(model.state_dict().items()), sorted(loaded.state_dict().items()), strict=True
    ):
        assert ka == kb and torch.equal(va, vb)
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:
        q_bytes = sum(
            f.get_tensor(k).numel() * f.get_tensor(k).element_size()
            for k in f.keys()  # noqa: SIM118 - a safetensors handle, not a dict
            if k.startswith("quant/")
        )
        assert f.get_tensor("quant/down/qweight").shape == (
            128,
            128,
        )  # 256 int4 codes per row, two per byte
    fp_bytes = 4 * sum(
        m.weight.numel() + m.bias.numel()
        for m in (make_net().encoder["q"], make_net().encoder["up"], make_net().down)
    )
    assert q_bytes <= 0.2 * fp_bytes


def test_load_errors(tmp_path):
    with pytest.raises(InputError, match="does not exist"):
        load_quantized(tmp_path / "missing.safetensors", make_net)
    junk = tmp_path / "junk.safetensors"
    junk.write_bytes(b"not a safetensors file")
    with pytest.raises(InputError, match="safetensors"):
        load_quantized(junk, make_net)


def quiet_case(calib_rows=512, quiet=True):
    torch.manual_seed(0)
    lin = nn.Linear(128, 256)
    g = torch.Generator().manual_seed(1)
    calib = torch.randn(calib_rows, 128, generator=g)
    test = torch.randn(256, 128, generator=g)
    if quiet:
        calib[:, 5] = 0.0  # silent during calibration, as loud as the others at inference
    return lin, calib, test


def test_a_channel_quiet_in_calibration_is_not_amplified(caplog):
    """The issue's case: one input channel zero in calibration. SmoothQuant's own scale for it would
    be the 1e-5 floor and multiply it ~400x at inference (relative error 0.87 before the fix)."""
    lin, calib, test = quiet_case()
    ref = lin(test).detach()
    errors = {}
    with caplog.at_level("WARNING"):
        for method in ("rtn", "smoothquant", "duquant"):
            q = quantize(
                nn.Sequential(copy.deepcopy(lin)),
                QuantConfig(method=method, block_size=64, rotation_steps=32),
                [calib],
            )
            y = q(test).detach()
            errors[method] = float((y - ref).norm() / ref.norm())
    assert errors["smoothquant"] <= 1.5 * errors["rtn"], errors
    assert errors["duquant"] <= 1.5 * errors["rtn"], errors
    assert "quiet or dead during calibration" in caplog.text and "0 (1: 5)" in caplog.text


@pytest.mark.parametrize(
    ("calib", "message"),
    [
        ([torch.randn(3, 128)], "saw only 3 calibration tokens; duquant .* at least 32"),
        ([torch.zeros(0, 128)], "saw 0 calibration tokens"),
    ],
)
def test_too_few_calibration_tokens_is_one_clear_error(calib, message):
    with pytest.raises(DataError, match=message):
        quantize(nn.Sequential(nn.Linear(128, 64)), QuantConfig(**SMALL), calib)


def test_loading_into_the_wrong_model_and_bad_numbers_are_our_errors(tmp_path):
    q = quantize(nn.Sequential(nn.Linear(128, 64)), QuantConfig(method="rtn"), batches())
    path = save_quantized(q, tmp_path / "q.safetensors")
    with pytest.raises(InputError, match=r"layer '0' was quantized as Linear\(128, 64\)"):
        load_quantized(path, lambda: nn.Sequential(nn.Linear(128, 65)))
    with pytest.raises(InputError, match="has no layer '0'"):
        load_quantized(path, lambda: nn.Sequential())
    with pytest.raises(ConfigError, match=r"QuantConfig: smooth_alpha=3: smooth_alpha must lie"):
        QuantConfig(smooth_alpha=3)
    cfg = QuantConfig()
    with pytest.raises(ConfigError, match="block_size"):
        cfg.block_size = 0


def test_load_reuses_the_saved_kernel_where_exact_else_says_which_runs(
    tmp_path, monkeypatch, caplog
):
    """Each saved layer records the kernel it was validated with; load runs it again where it is
    exact (not whatever the measurements there favour), else another exact one, in one warning."""
    import json as _json

    from safetensors import safe_open

    from accelkit.quant.method import kernels

    cfg = QuantConfig(method="rtn", wbits=4, weight_format="plain", exclude=["narrow"], **SMALL)
    monkeypatch.setenv(kernels.ENV_KERNEL, "fbgemm")
    model = quantize(make_net(), cfg, batches())
    assert {m.kernel for m in model.modules() if isinstance(m, QuantLinear)} == {"fbgemm"}
    path = save_quantized(model, tmp_path / "q.safetensors")
    with safe_open(str(path), framework="pt") as f:
        saved = _json.loads(f.metadata()["kernels"])
    assert set(saved.values()) == {"fbgemm"} and "down" in saved

    monkeypatch.delenv(kernels.ENV_KERNEL)
    fast_onednn = {"onednn": [1e-6, 1e-6], "fbgemm": [1.0, 1.0], "float": [1.0, 1.0]}
    table = kernels.KernelTable(tmp_path / "k.json", lambda n, m: fast_onednn)
    monkeypatch.setattr(kernels, "_TABLE", [table])
    x = batches(1)[0]
    with caplog.at_level("WARNING"):
        loaded = load_quantized(path, make_net)
    assert {m.kernel for m in loaded.modules() if isinstance(m, QuantLinear)} == {"fbgemm"}
    assert "kernel" not in caplog.text
    with torch.no_grad():
        assert torch.equal(loaded(x), model(x))

    # where fbgemm is not exact, another exact kernel runs the layers, and one line says so
    real_exact = kernels.exact
    monkeypatch.setattr(
        kernels, "exact", lambda kern, *a, **k: kern != "fbgemm" and real_exact(kern, *a, **k)
    )
    with caplog.at_level("WARNING"):
        other = load_quantized(path, make_net)
    assert {m.kernel for m in other.modules() if isinstance(m, QuantLinear)} == {"onednn"}
    lines = [r.getMessage() for r in caplog.records if "fbgemm" in r.getMessage()]
    assert len(lines) == 1 and "onednn" in lines[0] and str(path) in lines[0], caplog.text
    with torch.no_grad():  # exact integer sums either way: the same outputs
        assert torch.equal(other(x), model(x))


def test_activation_bits_per_layer_reach_the_layers():
    cfg = QuantConfig(method="rtn", layer_abits={"down": 7}, exclude=["narrow"], **SMALL)
    model = quantize(make_net(), cfg, batches())
    assert model.down.spec.abits == 7 and model.encoder["up"].spec.abits == 8
    with pytest.raises(InputError, match=r"per-layer bits name 'nowhere'"):
        quantize(make_net(), QuantConfig(layer_abits={"nowhere": 7}, **SMALL), batches())
