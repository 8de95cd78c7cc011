"""How to quantize: `QuantConfig` and its loading (no torch import: `accelkit --help` reads it).

Sources, lowest precedence first: defaults < openpi's `OPENPI_DUQUANT_*` < `ACCELKIT_QUANT_<FIELD>`
< YAML < keywords (flags), by the one loader in `runtime/config.py`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from pydantic import Field, field_validator

from accelkit.errors import ConfigError
from accelkit.runtime.config import Section, Settings, load

VALID_BITS = (2, 3, 4, 5, 6, 7, 8, 16)


def check_bits(bits: int, what: str) -> int:
    if isinstance(bits, bool) or not isinstance(bits, int) or bits not in VALID_BITS:
        raise ConfigError(
            f"{what}={bits!r} is not supported; use an integer in 2..8, or 16 to turn {what} quantization off"
        )
    return bits


ENV_PREFIX = "ACCELKIT_QUANT_"
# openpi's DuQuant fork read these; they are documented aliases of ACCELKIT_QUANT_* fields.
OPENPI_ALIASES = {
    "OPENPI_DUQUANT_WBITS": "wbits",
    "OPENPI_DUQUANT_ABITS": "abits",
    "OPENPI_DUQUANT_BLOCK": "block_size",
    "OPENPI_DUQUANT_SCOPE": "scope",
    "OPENPI_DUQUANT_INCLUDE": "include",
    "OPENPI_DUQUANT_EXCLUDE": "exclude",
    "OPENPI_DISABLE_TORCH_COMPILE": "disable_compile",
}


class QuantConfig(Settings):
    """How to quantize; see docs/quant.md. Loads from keywords, YAML and ACCELKIT_QUANT_* / OPENPI_DUQUANT_*."""

    wbits: int = 4
    abits: int = 8
    method: Literal["duquant", "smoothquant", "rtn"] = "duquant"
    block_size: int = 128
    rotation_steps: int = 256
    permutation: bool = True
    smooth_alpha: float = 0.6
    weight_group_size: int | None = None
    weight_clip: float | Literal["search"] = "search"
    act_clip: float = 0.9
    act_granularity: Literal["per-token-dynamic", "per-tensor-static"] = "per-token-dynamic"
    include: list[str] = Field(default_factory=lambda: ["*"])
    exclude: list[str] = Field(default_factory=list)
    scope: str = ""
    indivisible: Literal["skip", "error"] = "skip"
    calibration_rows: int = 2048
    seed: int = 0
    disable_compile: bool = False

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

    @field_validator("block_size", "rotation_steps", "calibration_rows")
    @classmethod
    def _positive(cls, value, info):
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


SECTION = Section(QuantConfig, env_prefix=ENV_PREFIX, env_aliases=OPENPI_ALIASES)


# the CLI flags whose names differ from their fields (errors name what the user typed)
FLAG_NAMES = {"weight_group_size": "--group-size", "disable_compile": "--compile/--no-compile"}


def load_config(yaml_path=None, env: Mapping[str, str] | None = None, **keywords) -> QuantConfig:
    """defaults < OPENPI_DUQUANT_* < ACCELKIT_QUANT_* < YAML < keywords (runtime/config.py)."""
    return load(
        [SECTION],
        path=yaml_path,
        env=env,
        arguments={None: keywords},
        argument_names={None: FLAG_NAMES},
    )[None]
