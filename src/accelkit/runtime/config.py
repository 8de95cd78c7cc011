"""Config is data: pydantic models loaded from a YAML file, the environment and keywords (flags).

One loader for every capability. A capability declares its settings as `Section`s: the model, its
entry in the config file, its environment prefix and the names other tools gave its fields
(openpi's `OPENPI_DUQUANT_*`, EmbeddingTrident's `MILVUS_*` / `triton:` section) as data; `load`
layers them, lowest precedence first:

    defaults < other tools' variables < ACCELKIT_<SECTION>_<FIELD> < other tools' file sections
             < the section's own file entry < keywords (flags)

(docs/cli.md, "Configuration": an explicit argument beats a config file, which beats the
environment.)
A relative path written in a config file means a path beside that file: the fields a model
declares in `file_paths` are resolved against the file's folder when they come from a file (so a
service started from `/` by a service manager finds `model/encoder.onnx` next to its config),
and `file_paths_if_found` the same when something exists there (a dataset field that may also
hold a Hugging Face repo id such as `lerobot/pusht`). From the environment or the command line a
relative path keeps meaning one below the working directory.
Unknown keys anywhere are an error that names the key and where it came from; a bad value is
reported by the name the user gave it (`--format`, `ACCELKIT_STATS_SEED`, `jobs.yaml [job]: seed`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from accelkit.errors import ConfigError

Model = TypeVar("Model", bound="Settings")


class Settings(BaseModel):
    """Base for every config model: unknown keys are errors, values are validated on assignment.
    Built directly from Python (`QuantConfig(wbits=9)`), a bad value raises ConfigError with one
    line naming the field, as the loader does for flags, variables and files."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, frozen=False)
    # fields holding paths (a string, or a list of strings) that a config file gives relative
    # to its own folder; values in `path_words` (e.g. "auto") and URIs ("s3://…") are kept
    file_paths: ClassVar[tuple[str, ...]] = ()
    file_paths_if_found: ClassVar[tuple[str, ...]] = ()
    path_words: ClassVar[frozenset[str]] = frozenset()

    def __init__(self, **values: Any):
        try:
            super().__init__(**values)
        except ValidationError as exc:
            raise InvalidSettings(exc, type(self).__name__) from None

    def __setattr__(self, name: str, value: Any):
        try:
            super().__setattr__(name, value)
        except ValidationError as exc:
            raise InvalidSettings(exc, type(self).__name__) from None

    def updated(self: Model, **values: Any) -> Model:
        """A copy with `values` in place of these fields', validated (an unknown name is an
        error naming it); itself when there are none."""
        return type(self)(**{**self.model_dump(), **values}) if values else self


class InvalidSettings(ConfigError):
    """A settings model refused a value; `validation` keeps pydantic's details so the loader can
    name the flag, variable or file entry the value came from."""

    def __init__(self, validation: ValidationError, model: str):
        super().__init__(_describe(validation, model))
        self.validation = validation


def _describe(exc: ValidationError, model: str) -> str:
    parts = []
    for err in exc.errors():
        where = ".".join(str(p) for p in err["loc"]) or "<root>"
        if err["type"] == "extra_forbidden":
            parts.append(f"unknown field {where!r}")
        else:
            msg = err["msg"].removeprefix("Value error, ")
            parts.append(f"{where}={err.get('input')!r}: {msg}")
    return f"{model}: " + "; ".join(parts)


@dataclass(frozen=True)
class Section:
    """One settings model, declared: where its values come from and under which names.

    `key` is its entry in the config file (None: the file's top level holds its fields).
    `env_aliases` maps another tool's variable to a field (or to a legacy key `adapt` turns into
    fields); `file_aliases` maps another tool's file entry to `{its key: field or legacy key}`
    (the entry None is the file's top level). `adapt` turns the legacy keys of one source into
    fields (e.g. MILVUS_HOST + MILVUS_PORT -> uri); it is pure and sees one source at a time.
    """

    model: type[Settings]
    key: str | None = None
    env_prefix: str | None = None
    env_aliases: Mapping[str, str] = field(default_factory=dict)
    file_aliases: Mapping[str | None, Mapping[str, str]] = field(default_factory=dict)
    adapt: Callable[[dict[str, Any]], dict[str, Any]] | None = None


@dataclass(frozen=True)
class Layer:
    """Values from one source; `names` holds how the user wrote each field (for error messages)."""

    source: str
    values: Mapping[str, Any]
    names: Mapping[str, str] = field(default_factory=dict)


def read_yaml(path: str | os.PathLike) -> dict[str, Any]:
    """Load a YAML mapping, with errors that name the file."""
    import yaml

    file = Path(path)
    if file.exists() and not file.is_file():
        what = "a folder" if file.is_dir() else "not a regular file (a device, a pipe or a socket)"
        raise ConfigError(
            f"config file {file} is {what}; give --config the path of a YAML file (an empty"
            " config: an empty file, or leave --config out)"
        )
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
    return {
        name: env[f"{prefix}{name.upper()}"]
        for name in model.model_fields
        if f"{prefix}{name.upper()}" in env
    }


def build(model: type[Model], *layers: Layer) -> Model:
    """Merge layers (lowest precedence first) and validate once.

    Each layer is checked for unknown keys on its own, so the error names the source it came from.
    """
    merged: dict[str, Any] = {}
    for layer in layers:
        unknown = [key for key in layer.values if key not in model.model_fields]
        if unknown:
            allowed = ", ".join(sorted(model.model_fields))
            raise ConfigError(
                f"{layer.source}: unknown key {unknown[0]!r}; allowed keys: {allowed}"
            )
        merged.update({k: v for k, v in layer.values.items() if v is not None})
    try:
        return model.model_validate(merged)
    except InvalidSettings as exc:
        raise ConfigError(_name_the_input(exc.validation, layers, model.__name__)) from None


def _name_the_input(exc: ValidationError, layers: Sequence[Layer], fallback: str) -> str:
    """The error in the user's words: the flag, variable or file entry that gave the bad value
    (`--format 'bogus': Input should be ...`), not the layering machinery."""
    parts = []
    for err in exc.errors():
        msg = err["msg"].removeprefix("Value error, ")
        loc = err["loc"]
        key = str(loc[0]) if loc else "<root>"
        given = [layer for layer in layers if layer.values.get(key) is not None]
        if not given:
            where = ".".join(str(p) for p in loc) or "<root>"
            parts.append(f"{fallback}: {where}: {msg}")
            continue
        layer = given[-1]
        name = layer.names.get(key, f"{layer.source}: {key}")
        inner = "".join(f"[{p}]" for p in loc[1:])
        parts.append(f"{name}{inner} {layer.values[key]!r}: {msg}")
    return "; ".join(parts)


def _aliased(
    section: Section, values: Mapping[str, Any], aliases: Mapping[str, str], source: str
) -> Layer:
    """A layer from another tool's names: rename, check, adapt."""
    renamed: dict[str, Any] = {}
    names: dict[str, str] = {}
    for key, value in values.items():
        renamed[aliases[key]] = value
        names[aliases[key]] = f"{source}: {key}"
    if section.adapt is not None:
        renamed = section.adapt(renamed)
    return Layer(source, renamed, names)


def beside(value: Any, folder: Path, words: frozenset[str] = frozenset(), found: bool = False):
    """`value` (a path, or a list of them) as written in a file in `folder`: a relative path
    joined to `folder`; an absolute path, `~/…` (expanded), a URI or one of `words` as it is.
    `found`: joined only when something exists at the joined path."""
    if isinstance(value, list):
        return [beside(v, folder, words, found) for v in value]
    if not isinstance(value, str) or not value.strip() or "://" in value:
        return value
    if value.strip().lower() in words:
        return value
    path = Path(value).expanduser()
    if path.is_absolute():
        return str(path)
    joined = folder / path
    return value if found and not joined.exists() else str(joined)


def _paths_beside(model: type[Settings], values: dict[str, Any], folder: Path | None) -> dict:
    """A file layer's values with the model's path fields resolved against the file's folder."""
    if folder is None:
        return values
    resolved = dict(values)
    for name in (*model.file_paths, *model.file_paths_if_found):
        if name in resolved:
            found = name in model.file_paths_if_found
            resolved[name] = beside(resolved[name], folder, model.path_words, found)
    return resolved


def section_layers(
    section: Section,
    data: Mapping[str, Any],
    source: str,
    env: Mapping[str, str],
    arguments: Mapping[str, Any] | None = None,
    argument_names: Mapping[str, str] | None = None,
    folder: Path | None = None,
) -> list[Layer]:
    """The layers of one section, lowest precedence first (see the module docstring); `folder`:
    the config file's, against which its relative paths resolve."""
    layers = []
    found = {var: env[var] for var in section.env_aliases if str(env.get(var, "")).strip()}
    if found:
        renamed = {section.env_aliases[var]: value.strip() for var, value in found.items()}
        values = section.adapt(renamed) if section.adapt else renamed
        names = {section.env_aliases[var]: var for var in found}
        layers.append(Layer("environment", values, names))
    if section.env_prefix:
        values = env_values(section.model, section.env_prefix, env)
        names = {name: f"{section.env_prefix}{name.upper()}" for name in values}
        layers.append(Layer(f"environment {section.env_prefix}*", values, names))
    for entry, aliases in section.file_aliases.items():
        if entry == section.key:
            continue
        values = data if entry is None else _entry(data, entry, source)
        values = {k: v for k, v in values.items() if k in aliases}
        if values:
            where = source if entry is None else f"{source} [{entry}]"
            aliased = _aliased(section, values, aliases, where)
            layers.append(
                Layer(
                    aliased.source,
                    _paths_beside(section.model, dict(aliased.values), folder),
                    aliased.names,
                )
            )
    own = _own_entry(section, data, source)
    if own:
        where = source if section.key is None else f"{source} [{section.key}]"
        legacy = section.file_aliases.get(section.key, {})
        plain = {k: v for k, v in own.items() if k not in legacy}
        if legacy and len(plain) < len(own):
            aliased = _aliased(
                section, {k: v for k, v in own.items() if k in legacy}, legacy, where
            )
            layers.append(
                Layer(
                    aliased.source,
                    _paths_beside(section.model, dict(aliased.values), folder),
                    aliased.names,
                )
            )
        plain = _paths_beside(section.model, plain, folder)
        layers.append(Layer(where, plain, {k: f"{where}: {k}" for k in plain}))
    arguments = {k: v for k, v in (arguments or {}).items() if v is not None}
    names = {k: f"--{k.replace('_', '-')}" for k in arguments} | dict(argument_names or {})
    layers.append(Layer("arguments", arguments, names))
    return layers


def _entry(data: Mapping[str, Any], key: str, source: str) -> dict[str, Any]:
    value = data.get(key) or {}
    if not isinstance(value, dict):
        raise ConfigError(f"{source} [{key}] must be a mapping of settings")
    return value


def _own_entry(section: Section, data: Mapping[str, Any], source: str) -> dict[str, Any]:
    if section.key is None:
        return {k: v for k, v in data.items() if k in section.model.model_fields}
    return _entry(data, section.key, source)


def _check_alias_entries(sections: Sequence[Section], data: Mapping[str, Any], source: str):
    """Another tool's file entry may feed several sections; a key none of them takes is unknown."""
    owned = {section.key for section in sections}
    taken: dict[str, set[str]] = {}
    for section in sections:
        for entry, aliases in section.file_aliases.items():
            if entry is not None and entry not in owned:
                taken.setdefault(entry, set()).update(aliases)
    for entry, keys in taken.items():
        for key in _entry(data, entry, source):
            if key not in keys:
                allowed = ", ".join(sorted(keys))
                raise ConfigError(
                    f"{source} [{entry}]: unknown key {key!r}; allowed keys: {allowed}"
                )


def file_keys(sections: Sequence[Section]) -> set[str]:
    """The top-level keys a config file for these sections may hold."""
    keys: set[str] = set()
    for section in sections:
        if section.key is None:
            keys |= set(section.model.model_fields)
        else:
            keys.add(section.key)
        for entry, aliases in section.file_aliases.items():
            keys |= set(aliases) if entry is None else {entry}
    return keys


def _check_file_keys(data: Mapping[str, Any], allowed: set[str], source: str) -> None:
    for key in data:
        if key not in allowed:
            raise ConfigError(
                f"{source}: unknown key {key!r}; allowed keys: {', '.join(sorted(allowed))}"
            )


def load(
    sections: Sequence[Section],
    *,
    path: str | os.PathLike | None = None,
    env: Mapping[str, str] | None = None,
    arguments: Mapping[str | None, Mapping[str, Any]] | None = None,
    argument_names: Mapping[str | None, Mapping[str, str]] | None = None,
    data: Mapping[str, Any] | None = None,
) -> dict[str | None, Settings]:
    """Load every section from defaults, environment, the file at `path` (or its already read
    `data`) and `arguments` (keyed by section key). Returns the validated models by section key."""
    env = os.environ if env is None else env
    if data is None:
        data = read_yaml(path) if path is not None else {}
    source = str(path) if path is not None else "config"
    _check_file_keys(data, file_keys(sections), source)
    _check_alias_entries(sections, data, source)
    arguments = arguments or {}
    argument_names = argument_names or {}
    return {
        section.key: build(
            section.model,
            *section_layers(
                section,
                data,
                source,
                env,
                arguments.get(section.key),
                argument_names.get(section.key),
                config_folder(path),
            ),
        )
        for section in sections
    }


def config_folder(path: str | os.PathLike | None) -> Path | None:
    """The absolute folder of a config file (None without one): its relative paths' base."""
    return None if path is None else Path(os.path.abspath(Path(path).expanduser())).parent


def load_settings(
    model: type[Model],
    *,
    yaml_path: str | os.PathLike | None = None,
    section: str | None = None,
    env_prefix: str | None = None,
    env: Mapping[str, str] | None = None,
    **keywords: Any,
) -> Model:
    """Load one `model` (optionally from one named entry of the file) by the same rules as `load`."""
    env = os.environ if env is None else env
    declared = Section(model, key=section, env_prefix=env_prefix)
    data = read_yaml(yaml_path) if yaml_path is not None else {}
    source = str(yaml_path) if yaml_path is not None else "config"
    if section is not None and yaml_path is not None and section not in data:
        names = ", ".join(sorted(map(str, data))) or "none"
        raise ConfigError(f"{yaml_path}: no entry named {section!r}; entries: {names}")
    if section is None:
        fields = set(model.model_fields)
        if data and all(isinstance(v, dict) for v in data.values()) and not fields & set(data):
            names = ", ".join(sorted(map(str, data)))
            raise ConfigError(
                f"{yaml_path} holds named entries ({names}); pick one with --config-name NAME"
            )
        _check_file_keys(data, file_keys([declared]), source)
    return build(
        model,
        *section_layers(declared, data, source, env, keywords, folder=config_folder(yaml_path)),
    )
