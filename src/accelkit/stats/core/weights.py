"""The weights of a mixture's members: exact fractions, parsed once (`--weights`, `StatsSettings`,
`compute_mixture_stats`)."""

from __future__ import annotations

from fractions import Fraction

from accelkit.errors import ConfigError


def parse_weight(value, where: str) -> Fraction:
    """One member's weight as an exact fraction: an int, a decimal or fraction string ("0.7",
    "1/3", "2e-3"), a Fraction, or a float read as the decimal it prints as."""
    try:
        if isinstance(value, bool):
            raise ValueError
        if isinstance(value, Fraction | int):
            weight = Fraction(value)
        elif isinstance(value, float):
            weight = Fraction(repr(value))
        else:
            weight = Fraction(str(value).strip())
    except (ValueError, ZeroDivisionError, TypeError):
        raise ConfigError(
            f"{where} {value!r} is not a number; give decimals or fractions, e.g. 0.7,0.2,0.1"
        ) from None
    if weight <= 0:
        raise ConfigError(
            f"{where} {value!r} is not positive; a dataset of weight 0 is no part of the"
            " mixture: leave it out"
        )
    return weight


def parse_weights(values, members: int) -> tuple[Fraction, ...] | None:
    """The members' weights (None: the union), one per member, in the members' order."""
    if values is None:
        return None
    if isinstance(values, str):
        values = [part for part in values.split(",") if part.strip()]
    values = list(values)
    if len(values) != members:
        raise ConfigError(
            f"--weights has {len(values)} value(s) for {members} dataset(s); give one weight per"
            " dataset, in the order the datasets are given"
        )
    return tuple(parse_weight(v, f"--weights value {i + 1}") for i, v in enumerate(values))
