"""How to quantize: `QuantConfig` and its loading (no torch import: `accelkit --help` reads it).

Sources, lowest precedence first: defaults < openpi's `OPENPI_DUQUANT_*` < `ACCELKIT_QUANT_<FIELD>`
< YAML < keywords (flags), by the one loader in `runtime/config.py`.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping
from typing import Literal

from pydantic import Field, field_validator

from accelkit.errors import ConfigError
from accelkit.runtime.config import Section, Settings, load

VALID_BITS = (2, 3, 4, 5, 6, 7, 8, 16)
# progressive weights' group when none is given (QServe uses 128; method/quantizers.py quantizes
# them): chosen on benchmarks/results/quant_matrix.json, docs/quant.md "Which default"
PROGRESSIVE_GROUP_SIZE = 64


def check_bits(bits: int, what: str) -> int:
    if isinstance(bits, bool) or not isinstance(bits, int) or bits not in VALID_BITS:
        raise ConfigError(
            f"{what}={bits!r} is not supported; use an integer in 2..8, or 16 to turn {what} quantization off"
        )
    return bits


ENV_PREFIX = "ACCELKIT_QUANT_"
# openpi's DuQuant fork (openpi/models_pytorch/duquant_layers.py) read these; each keeps the
# fork's meaning as an alias of a QuantConfig field, below the ACCELKIT_QUANT_* variables.
OPENPI_ALIASES = {
    "OPENPI_DUQUANT_WBITS_DEFAULT": "wbits",
    "OPENPI_DUQUANT_WBITS": "layer_wbits",  # per layer: "name:bits,name:bits"
    "OPENPI_DUQUANT_ABITS": "abits",  # 0 = activations not quantized (our 16)
    "OPENPI_DUQUANT_BLOCK": "block_size",
    "OPENPI_DUQUANT_SCOPE": "scope",
    "OPENPI_DUQUANT_INCLUDE": "include_regex",  # Python regexes, re.search on the layer name
    "OPENPI_DUQUANT_EXCLUDE": "exclude_regex",
    "OPENPI_DUQUANT_PERMUTE": "permutation",
    "OPENPI_DUQUANT_LS": "smooth_alpha",  # the fork's lambda_smooth
    "OPENPI_DUQUANT_ROW_ROT": "row_rot",  # only "disabled" has a meaning here
    "OPENPI_DUQUANT_DRYRUN": "dry_run",
    "OPENPI_DISABLE_TORCH_COMPILE": "disable_compile",
}
# the fork's variables that have no counterpart: what to use instead
OPENPI_REFUSED = {
    "OPENPI_DUQUANT_ACT_PCT": "activations are quantized per token at run time (no calibration "
    "percentile); unset it, and use ACCELKIT_QUANT_ACT_CLIP (a ratio of each token's range) to clip",
    "OPENPI_DUQUANT_CALIB_STEPS": "calibration is sized in token rows; unset it and set "
    "ACCELKIT_QUANT_CALIBRATION_ROWS (default 2048) or pass fewer calibration batches",
    "OPENPI_DUQUANT_PACKDIR": "the quantized model is one file; unset it and use "
    "`accelkit quant apply --output FILE` (save_quantized) and load_quantized",
}


def _openpi_values(values: dict) -> dict:
    """The fork's values in our terms: ABITS=0 is 'off' (16); ROW_ROT other than 'disabled' has
    no counterpart (we rotate input channels only)."""
    if str(values.get("abits", "")).strip() == "0":
        values["abits"] = 16
    row_rot = values.pop("row_rot", None)
    if row_rot is not None and str(row_rot).strip().lower() not in ("disabled", "0", "false", ""):
        raise ConfigError(
            f"OPENPI_DUQUANT_ROW_ROT={row_rot!r}: accelkit rotates input channels only (no output-side "
            "row rotation); unset it or set it to disabled"
        )
    return values


Method = Literal["duquant", "smoothquant", "rtn"]


class QuantConfig(Settings):
    """How to quantize; see docs/quant.md. Loads from keywords, YAML and ACCELKIT_QUANT_* / OPENPI_DUQUANT_*."""

    wbits: int = 4
    abits: int = 8
    method: Method = "duquant"
    # the rotation block: an int, or "auto" = per layer, at most 1/12 of its output width (see
    # `layer_block`), between 32 and 128 — the online transform's cost is n·b multiply-adds per
    # token against the layer's n·m int8 GEMM
    block_size: int | Literal["auto"] = "auto"
    rotation_steps: int = 256
    # defaults chosen on benchmarks/results/quant_matrix.json (docs/quant.md, "Which default")
    permutation: bool = False
    smooth_alpha: float = 0.6
    weight_group_size: int | None = None
    # progressive: 4-bit layers store int4 groups with integer scales over per-channel int8
    # (QServe) and run as one int8 GEMM; groups of weight_group_size, else 64 (per output channel,
    # plain, for a layer whose width 64 does not divide)
    weight_format: Literal["plain", "progressive"] = "progressive"
    weight_clip: float | Literal["search"] = "search"
    act_clip: float = 0.9
    act_granularity: Literal["per-token-dynamic", "per-tensor-static"] = "per-token-dynamic"
    include: list[str] = Field(default_factory=lambda: ["*"])
    # a language model's output projection (`lm_head`): kept in float unless asked, so the
    # last-hidden-state cosine sees every quantized layer; --lm-head quantizes it too (its error
    # then shows in the perplexity ratio and next-token agreement)
    lm_head: bool = False
    exclude: list[str] = Field(default_factory=list)
    scope: str = ""
    indivisible: Literal["skip", "error"] = "skip"
    calibration_rows: int = 2048
    seed: int = 0
    disable_compile: bool = False
    # openpi fork compatibility: regexes (re.search) on top of the globs, bits per layer, a plan only
    include_regex: str | None = None
    exclude_regex: str | None = None
    layer_wbits: dict[str, int] = Field(default_factory=dict)
    # activation bits per layer over `abits` (`quant apply`'s default fills it where a layer's
    # weights need 7-bit codes to run exactly on this CPU's int8 GEMM)
    layer_abits: dict[str, int] = Field(default_factory=dict)
    dry_run: bool = False

    def quantizes_nothing(self) -> bool:
        """wbits 16 with abits 16 and no layer below: the FP32 model (with DuQuant, only its
        exact transforms — a check of their equivalence, not a quantization)."""
        overrides = (*self.layer_wbits.values(), *self.layer_abits.values())
        return self.wbits == 16 and self.abits == 16 and all(b == 16 for b in overrides)

    @field_validator("include_regex", "exclude_regex")
    @classmethod
    def _regex(cls, value):
        if value is None or not value.strip():
            return None
        try:
            re.compile(value)
        except re.error as exc:
            raise ValueError(f"is not a valid regular expression ({exc})") from None
        return value

    @field_validator("layer_wbits", "layer_abits", mode="before")
    @classmethod
    def _layer_bits(cls, value):
        if isinstance(value, str):  # the fork's "name:bits,name:bits"
            pairs = {}
            for part in (p.strip() for p in value.split(",")):
                name, sep, bits = part.rpartition(":")
                if not part:
                    continue
                if not sep or not name.strip() or not bits.strip().lstrip("-").isdigit():
                    raise ValueError(
                        f"entry {part!r} is not name:bits; e.g. encoder.layer.0.attention.self.query:8"
                    )
                pairs[name.strip()] = int(bits)
            return pairs
        return value

    @field_validator("layer_wbits", "layer_abits")
    @classmethod
    def _layer_bits_valid(cls, value, info):
        for name, bits in value.items():
            check_bits(bits, f"{info.field_name[6:]} of {name}")
        return value

    @field_validator("include", "exclude", mode="before")
    @classmethod
    def _split(cls, value):
        if isinstance(value, str):
            return [part.strip() for part in value.split(",") if part.strip()]
        return value

    @field_validator("wbits", "abits")
    @classmethod
    def _bits(cls, value, info):
        check_bits(value, info.field_name)
        return value

    @field_validator("block_size", mode="before")
    @classmethod
    def _block(cls, value):
        if isinstance(value, str) and value.strip().lower() == "auto":
            return "auto"
        if isinstance(value, str) and not value.strip().lstrip("-").isdigit():
            raise ValueError("must be a positive integer or 'auto'")
        return value

    @field_validator("block_size", "rotation_steps", "calibration_rows")
    @classmethod
    def _positive(cls, value, info):
        if isinstance(value, str):  # "auto": block_size's (the others are integers by now)
            return value
        if value < (0 if info.field_name == "rotation_steps" else 1):
            raise ValueError(f"{info.field_name} must be positive")
        return value

    @field_validator("weight_group_size")
    @classmethod
    def _group(cls, value):
        if value is not None and value < 2:
            raise ValueError(
                "must be None (per output channel; --group-size 0) or a group size >= 2"
            )
        return value

    @field_validator("smooth_alpha", "act_clip")
    @classmethod
    def _unit(cls, value, info):
        if not 0.0 < value <= 1.0:
            raise ValueError(f"{info.field_name} must lie in (0, 1]")
        return value

    @field_validator("weight_clip")
    @classmethod
    def _clip(cls, value):
        if value != "search" and not 0.0 < float(value) <= 1.0:
            raise ValueError("weight_clip must be 'search' or a ratio in (0, 1]")
        return value

    def layer_block(self, in_features: int, out_features: int) -> int:
        """The rotation block of one layer: `block_size`, or with "auto" the largest power of
        two ≤ out_features / 12 within 32..128 that divides `in_features` (halved while it does
        not, down to 32). The transform then costs at most 1/12 of the layer's GEMM in
        multiply-adds: 128 for wide layers (LLMs, FFN-in), 32 for MiniLM's 384-wide outputs, where
        128 made the transform dearer than the int8 GEMM it feeds (docs/quant.md, "Speed")."""
        if self.block_size != "auto":
            return self.block_size
        block = 128
        while block > 32 and (block * 12 > out_features or in_features % block):
            block //= 2
        return block

    def layer_weights(
        self, name: str | None, in_features: int | None = None
    ) -> tuple[int, int | None, str]:
        """(wbits, group size, weight format) of one layer: `layer_wbits` wins over `wbits`.
        Progressive applies to 4-bit layers and always has groups — of `weight_group_size`, else
        the default size, where that divides `in_features`; a layer it does not divide keeps
        plain per-channel weights (an explicit group size that does not divide leaves the layer
        in float instead, see `indivisible`). 8-bit layers of the progressive family are
        symmetric int8 per output channel (`int8`: they run on the int8 GEMM as stored); other
        bit widths stay plain."""
        wbits = self.layer_wbits.get(name, self.wbits) if name is not None else self.wbits
        if self.weight_format == "progressive" and wbits == 8:
            return wbits, None, "int8"
        if self.weight_format == "progressive" and wbits == 4:
            if self.weight_group_size:
                return wbits, self.weight_group_size, "progressive"
            if in_features is None or in_features % PROGRESSIVE_GROUP_SIZE == 0:
                return wbits, PROGRESSIVE_GROUP_SIZE, "progressive"
            return wbits, None, "plain"
        return wbits, self.weight_group_size, "plain"


SECTION = Section(
    QuantConfig, env_prefix=ENV_PREFIX, env_aliases=OPENPI_ALIASES, adapt=_openpi_values
)


# the CLI flags whose names differ from their fields (errors name what the user typed)
FLAG_NAMES = {
    "weight_group_size": "--group-size",
    "disable_compile": "--compile/--no-compile",
    "weight_format": "--weight-format",
}


def load_config(yaml_path=None, env: Mapping[str, str] | None = None, **keywords) -> QuantConfig:
    """defaults < OPENPI_DUQUANT_* < ACCELKIT_QUANT_* < YAML < keywords (runtime/config.py).
    The fork's variables without a counterpart are refused with what to use instead; other
    OPENPI_DUQUANT_* variables get one warning naming them (they change nothing here)."""
    env = os.environ if env is None else env
    for var, instead in OPENPI_REFUSED.items():
        if str(env.get(var, "")).strip():
            raise ConfigError(f"{var} is not supported: {instead}")
    ignored = sorted(
        var for var in env if var.startswith("OPENPI_DUQUANT_") and var not in OPENPI_ALIASES
    )
    if ignored:
        logging.getLogger(__name__).warning(
            "quant: ignoring %s (openpi fork variables with no meaning here; see docs/quant.md)",
            ", ".join(ignored),
        )
    config = load(
        [SECTION],
        path=yaml_path,
        env=env,
        arguments={None: keywords},
        argument_names={None: FLAG_NAMES},
    )[None]
    assert isinstance(config, QuantConfig)  # SECTION's model
    return config


def config_for_run(source=None, group_size: int | None = None, **flags) -> QuantConfig:
    """The config of one `evaluate` / `apply` run: `source` — a `QuantConfig`, or a YAML file
    loaded over the defaults and the environment (`load_config`) — with the flags that are not
    None on top. `group_size=0` (`--group-size 0`) asks for per output channel even when the file
    or the environment set groups."""
    if isinstance(source, QuantConfig):
        updates = {key: value for key, value in flags.items() if value is not None}
        if group_size:
            updates["weight_group_size"] = group_size
        config = QuantConfig(**{**source.model_dump(), **updates})
    else:
        config = load_config(source, weight_group_size=group_size or None, **flags)
    if group_size == 0:
        config.weight_group_size = None
    return config
