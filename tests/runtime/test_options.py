"""An option declared once (`runtime/options.py`): a settings field with a `Flag` becomes a typer
option (its help the field's description) and a keyword of a library signature; what the command
line read reaches the model as its keywords, validated there once."""

import inspect
from typing import Annotated, Literal

import pytest
import typer
from pydantic import Field
from typer.testing import CliRunner

from accelkit.errors import ConfigError
from accelkit.runtime.config import Settings, load_settings
from accelkit.runtime.options import Flag, given, keyword_signature, with_options


class Job(Settings):
    source: Annotated[str | None, Flag(argument=True)] = Field(None, description="What to read.")
    mode: Annotated[Literal["a", "b"], Flag("--mode")] = Field("a", description="a or b.")
    levels: Annotated[
        list[float] | None,
        Flag("--levels", text=str | None, parse=lambda t: [float(x) for x in t.split(",")]),
    ] = Field(None, description="Levels, comma-separated.")
    strict: Annotated[bool, Flag("--strict")] = Field(False, description="Fail on warnings.")
    fast: Annotated[bool, Flag("--fast/--slow")] = Field(False, description="Fast or slow.")
    count: Annotated[int, Flag("--count", "-n")] = Field(1, description="How many.")


seen: list[Job] = []


@with_options(Job)
def job_command(
    as_json: Annotated[bool, typer.Option("--json", help="JSON out.")] = False, **options
) -> None:
    seen.append(load_settings(Job, env={}, **given(Job, options)))


def run(*argv: str):
    app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
    app.command()(job_command)
    seen.clear()
    done = CliRunner().invoke(app, list(argv))
    return done, (seen[0] if seen else None)


def test_the_command_line_is_made_from_the_fields():
    done, job = run("in.txt", "--mode", "b", "--levels", "0.1,0.9", "--strict", "--slow", "-n", "3")
    assert done.exit_code == 0, done.output
    assert job == Job(source="in.txt", mode="b", levels=[0.1, 0.9], strict=True, count=3)
    done, job = run("--fast")
    assert job == Job(fast=True)  # nothing else given: the model's defaults
    done, _ = run("--help")
    for field in Job.model_fields.values():
        assert " ".join(field.description.split()) in " ".join(done.output.split())
    assert (
        "--json" in done.output and "--strict" in done.output and "--no-strict" not in done.output
    )


def test_the_model_validates_what_the_command_line_read():
    done, _ = run("--mode", "c")  # a Literal reads as text; the model names the allowed values
    assert isinstance(done.exception, ConfigError)
    assert str(done.exception).startswith("--mode 'c': Input should be 'a' or 'b'")


def test_given_leaves_what_was_not_given_to_the_layers_below():
    assert given(Job, {"strict": False, "fast": None, "levels": None}) == dict.fromkeys(
        Job.model_fields
    )
    assert given(Job, {"fast": False})["fast"] is False  # --slow said no: given


def test_keyword_signature_is_the_models():
    def job(source=None, *, progress=False, **options):
        return options

    extra = (inspect.Parameter("progress", inspect.Parameter.KEYWORD_ONLY, default=False),)
    job.__signature__ = keyword_signature(Job, positional=("source",), extra=extra)
    parameters = inspect.signature(job).parameters
    assert list(parameters) == [*Job.model_fields, "progress"]
    assert parameters["source"].kind is inspect.Parameter.POSITIONAL_OR_KEYWORD
    assert parameters["count"].default == 1 and parameters["count"].annotation is int
    assert parameters["mode"].kind is inspect.Parameter.KEYWORD_ONLY
    with pytest.raises(TypeError, match="'bogus'"):
        inspect.signature(job).bind(bogus=1)
