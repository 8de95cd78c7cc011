"""Config is data: pydantic models loaded from YAML, environment and keywords.

Precedence (highest first): keywords > YAML file > environment (`ACCELKIT_<SECTION>_<FIELD>`) >
defaults. Unknown keys anywhere are an error that names the key and its source.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from accelkit.errors import ConfigError

Model = TypeVar("Model", bound="Settings")


class Settings(BaseModel):
    """Base for every config model: unknown keys are errors, values are validated on assignment."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, frozen=False)


def read_yaml(path: str | os.PathLike) -> dict[str, Any]:
    """Load a YAML mapping, with errors that name the file."""
    import yaml

    file = Path(path)
    if not file.is_file():
        raise ConfigError(f"config file {file} does not exist; check the path given to --config")
    try:
        data = yaml.safe_load(file.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise ConfigError(
            f"config file {file} is not valid YAML: {exc}".replace("\n", " ")
        ) from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(
            f"config file {file} must hold a mapping at the top level, not {type(data).__name__}"
        )
    return data


def env_values(
    model: type[BaseModel], prefix: str, env: Mapping[str, str] | None = None
) -> dict[str, str]:
    """Values for `model`'s fields from variables named `<prefix><FIELD>` (upper case)."""
    env = os.environ if env is None else env
    found = {}
    for name in model.model_fields:
        var = f"{prefix}{name.upper()}"
        if var in env:
            found[name] = env[var]
    return found


def _describe_validation(exc: ValidationError, source: str) -> str:
    parts = []
    for err in exc.errors():
        where = ".".join(str(p) for p in err["loc"]) or "<root>"
        if err["type"] == "extra_forbidden":
            parts.append(f"unknown key {where!r}")
        else:
            parts.append(f"{where}: {err['msg']}")
    return f"{source}: " + "; ".join(parts)


def build(model: type[Model], *layers: tuple[str, Mapping[str, Any]]) -> Model:
    """Merge layers (lowest precedence first; each a (source name, mapping)) and validate.

    Each layer is validated for unknown keys on its own, so the error names the source it came from.
    """
    merged: dict[str, Any] = {}
    for source, values in layers:
        unknown = [key for key in values if key not in model.model_fields]
        if unknown:
            allowed = ", ".join(sorted(model.model_fields))
            raise ConfigError(f"{source}: unknown key {unknown[0]!r}; allowed keys: {allowed}")
        merged.update({k: v for k, v in values.items() if v is not None})
    try:
        return model.model_validate(merged)
    except ValidationError as exc:
        named = _name_the_input(exc, layers)
        raise ConfigError(
            named or _describe_validation(exc, " + ".join(s for s, _ in layers) or model.__name__)
        ) from exc


def _name_the_input(exc: ValidationError, layers) -> str | None:
    """The error in the user's words: the flag, variable or file entry that gave the bad value
    (`--format 'bogus': Input should be ...`), not the layering machinery. None when an error is
    not about one top-level value."""
    parts = []
    for err in exc.errors():
        loc = err["loc"]
        if len(loc) != 1 or err["type"] == "extra_forbidden":
            return None
        field = str(loc[0])
        given = [(src, vals[field]) for src, vals in layers if vals.get(field) is not None]
        if not given:
            return None
        source, value = given[-1]
        if source == "arguments":
            name = f"--{field.replace('_', '-')}"
        elif source.startswith("environment ") and source.endswith("*"):
            name = f"{source.removeprefix('environment ').removesuffix('*')}{field.upper()}"
        else:
            name = f"{source}: {field}"
        parts.append(f"{name} {value!r}: {err['msg']}")
    return "; ".join(parts) or None


def load_settings(
    model: type[Model],
    *,
    yaml_path: str | os.PathLike | None = None,
    section: str | None = None,
    env_prefix: str | None = None,
    env: Mapping[str, str] | None = None,
    **keywords: Any,
) -> Model:
    """Load `model` from defaults < environment < YAML (optionally one section) < keywords."""
    layers: list[tuple[str, Mapping[str, Any]]] = []
    if env_prefix:
        layers.append((f"environment {env_prefix}*", env_values(model, env_prefix, env)))
    if yaml_path is not None:
        data = read_yaml(yaml_path)
        source = str(yaml_path)
        if section is not None:
            if section not in data:
                names = ", ".join(sorted(map(str, data))) or "none"
                raise ConfigError(f"{yaml_path}: no entry named {section!r}; entries: {names}")
            data = data[section]
            source = f"{yaml_path} [{section}]"
            if not isinstance(data, dict):
                raise ConfigError(f"{source} must be a mapping of settings")
        layers.append((source, data))
    layers.append(("arguments", {k: v for k, v in keywords.items() if v is not None}))
    return build(model, *layers)
