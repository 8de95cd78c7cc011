"""An option declared once: a settings field (`runtime.config.Settings`) is the option — its name,
type, default, validation and help text (the field's `description`) — and a `Flag` in its
annotation says how the command line writes it. The typer parameters of a command and the
keyword signature of a library function are made from the model, as LeRobot's dataclass configs
are its command line:

    class JobSettings(Settings):
        output: Annotated[str | None, Flag("--output", "-o")] = Field(
            default=None, description="Where to write."
        )

    @with_options(JobSettings)
    def job_command(config: ..., **options) -> None:
        settings = load_settings(JobSettings, **given(JobSettings, options))

The command line reads an option as text-like values and gives `None` for one not given, so a
config file or the environment below it still counts (`runtime/config.py`); a plain boolean flag
(`--per-episode`, no `/--no-…`) is given only when set. Validation stays the model's, once.
"""

from __future__ import annotations

import inspect
import types
import typing
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import BaseModel
from pydantic.fields import FieldInfo


@dataclass(frozen=True, init=False)  # its own __init__: the names come first, as typer's
class Flag:
    """How a field is written on the command line: its option names (`"--fast/--no-fast"`,
    `"-o"`), or `argument=True` for the command's positional argument. `text` is the type the
    command line reads where it is not the field's own (a `Literal` reads as `str`, a `bool` as a
    flag, anything else as the field's type or None); `parse` turns what it read into the
    field's value (the model validates it after)."""

    decls: tuple[str, ...]
    text: Any = None
    parse: Callable[[Any], Any] | None = None
    argument: bool = False

    def __init__(
        self,
        *decls: str,
        text: Any = None,
        parse: Callable[[Any], Any] | None = None,
        argument: bool = False,
    ):
        object.__setattr__(self, "decls", decls)
        object.__setattr__(self, "text", text)
        object.__setattr__(self, "parse", parse)
        object.__setattr__(self, "argument", argument)

    @property
    def switch(self) -> bool:
        """A plain boolean flag: on when given, else not given (no `--no-…` form)."""
        return self.text is bool


def flags(model: type[BaseModel]) -> Iterator[tuple[str, FieldInfo, Flag]]:
    """The model's command-line options in field order: (field name, field, its `Flag`)."""
    for name, field in model.model_fields.items():
        flag = next((m for m in field.metadata if isinstance(m, Flag)), None)
        if flag is not None:
            yield name, field, _completed(flag, field)


def _completed(flag: Flag, field: FieldInfo) -> Flag:
    """The flag with the type the command line reads filled in from the field's."""
    if flag.text is not None:
        return flag
    annotation = field.annotation
    if annotation is bool:  # `--x/--no-x` may also say no; `--x` alone only yes
        text = bool | None if any("/" in d for d in flag.decls) else bool
    else:
        text = _optional(_as_text(annotation))
    return Flag(*flag.decls, text=text, parse=flag.parse, argument=flag.argument)


def _as_text(annotation: Any) -> Any:
    """A `Literal` is read as text (the model names the allowed values in its error)."""
    if typing.get_origin(annotation) is Literal:
        return str
    if typing.get_origin(annotation) in (types.UnionType, typing.Union):
        args = tuple(_as_text(a) for a in typing.get_args(annotation))
        return typing.Union[args]  # noqa: UP007 (a runtime union of computed members)
    return annotation


def _optional(annotation: Any) -> Any:
    return annotation if type(None) in typing.get_args(annotation) else annotation | None


def command_parameters(model: type[BaseModel]) -> list[inspect.Parameter]:
    """The typer parameters of `model`'s flags, help text from each field's description."""
    import typer

    parameters = []
    for name, field, flag in flags(model):
        if flag.argument:
            info = typer.Argument(help=field.description)
        else:
            info = typer.Option(*flag.decls, help=field.description)
        parameters.append(
            inspect.Parameter(
                name,
                inspect.Parameter.POSITIONAL_OR_KEYWORD,
                annotation=Annotated[flag.text, info],
                default=False if flag.switch else None,
            )
        )
    return parameters


def with_options(model: type[BaseModel], *, after: str | None = None):
    """A command taking `**options` gets `model`'s flags as its typer parameters, before its own
    (the face's: `--config`, `--json`, …) or after its parameter `after`; `given` turns what it
    receives into the model's keywords."""

    def decorate(command):
        signature = inspect.signature(command, eval_str=True)
        own = [
            p for p in signature.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD
        ]
        at = 0 if after is None else [p.name for p in own].index(after) + 1
        parameters = [*own[:at], *command_parameters(model), *own[at:]]
        command.__signature__ = signature.replace(parameters=parameters)
        return command

    return decorate


def given(model: type[BaseModel], options: Mapping[str, Any]) -> dict[str, Any]:
    """What the command line read, as the model's keywords: each flag's `parse` applied, an unset
    switch (and an empty repeatable option) as not given (None)."""
    values = {}
    for name, _, flag in flags(model):
        value = options.get(name)
        if (flag.switch and not value) or value == []:
            value = None
        if value is not None and flag.parse is not None:
            value = flag.parse(value)
        values[name] = value
    return values


def keyword_signature(
    model: type[BaseModel],
    *,
    positional: tuple[str, ...] = (),
    leading: tuple[inspect.Parameter, ...] = (),
    extra: tuple[inspect.Parameter, ...] = (),
    exclude: tuple[str, ...] = (),
    returns: Any = inspect.Signature.empty,
) -> inspect.Signature:
    """A library function's signature made from `model`: its own `leading` parameters, the
    model's `positional` fields, then every other field but `exclude` as a keyword with the
    field's default and type, then `extra` (the function's own keywords). Set as the function's `__signature__`, help() and editors that
    read signatures at run time (IPython, Jupyter) show it, and `bind` checks a call."""
    fields = model.model_fields
    parameters = [
        inspect.Parameter(
            name,
            inspect.Parameter.POSITIONAL_OR_KEYWORD,
            default=fields[name].default,
            annotation=fields[name].annotation,
        )
        for name in positional
    ]
    parameters += [
        inspect.Parameter(
            name,
            inspect.Parameter.KEYWORD_ONLY,
            default=field.default,
            annotation=field.annotation,
        )
        for name, field in fields.items()
        if name not in positional and name not in exclude
    ]
    return inspect.Signature([*leading, *parameters, *extra], return_annotation=returns)
