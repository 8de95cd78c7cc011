"""`accelkit stats` (and the mount of `stats check`, `sample-dataset`): parse, call the library
(`accelkit.stats.compute`), render a table or the `--json` envelope. `stats check` is in
`stats/cli/check.py`, `sample-dataset` in `stats/cli/sample.py`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
import typer.core

from accelkit.errors import ConfigError
from accelkit.runtime.config import load_settings
from accelkit.runtime.options import given, with_options
from accelkit.stats.cli.check import check_command
from accelkit.stats.cli.diff import diff_command
from accelkit.stats.cli.report import print_report
from accelkit.stats.cli.sample import sample_dataset_command
from accelkit.stats.settings import ENV_PREFIX, StatsSettings

__all__ = ["ENV_PREFIX", "StatsSettings", "register"]


@with_options(StatsSettings)  # the dataset and every option before --config: its fields
def stats_command(
    config: Annotated[
        Path | None, typer.Option("--config", help="YAML file of named stats jobs.")
    ] = None,
    config_name: Annotated[
        str | None, typer.Option("--config-name", help="The job to run from --config.")
    ] = None,
    no_progress: Annotated[
        bool, typer.Option("--no-progress", help="Hide the progress bar.")
    ] = False,
    as_json: Annotated[
        bool,
        typer.Option(
            "--json", help="Print the written statistics and the run facts as JSON on stdout."
        ),
    ] = False,
    **options,
) -> None:
    """Normalization statistics (mean, std, min, max, exact quantiles) of robot datasets.

    `accelkit stats check DATASET` compares the statistics a dataset stores with exact ones;
    `accelkit stats diff A B` compares two statistics files."""
    if config_name and config is None:
        raise ConfigError("--config-name needs --config FILE naming the YAML file that holds it")
    settings = load_settings(
        StatsSettings,
        yaml_path=config,
        section=config_name if config is not None else None,
        env_prefix=ENV_PREFIX,
        **given(StatsSettings, options),
    )
    from accelkit.stats.computation.api import compute

    done = compute(settings=settings, progress=not no_progress)
    if as_json:
        from accelkit.runtime.json_output import print_json

        print_json(done.document(), run=done.run)
        return
    print_report(done.result, done.output, done.format, done.source)
    from accelkit.stats.formats.video import CameraResult

    cameras = done.result.cameras
    if isinstance(cameras, CameraResult):
        print(
            f"cameras ({cameras.mode}): {', '.join(cameras.stats)}: {cameras.frames_counted:,}"
            f" frames counted from {cameras.files} files in {cameras.seconds:.1f} s"
        )
    if done.backup is not None:
        print(f"previous files kept in {done.backup}")
    if done.plot is not None:
        flagged = f"; {done.flagged} dimension(s) flagged, see the warnings" if done.flagged else ""
        print(f"drew the distributions in {done.plot}{flagged}")


class StatsGroup(typer.core.TyperGroup):
    """`accelkit stats DATASET …` computes (the hidden `compute` command); `accelkit stats check
    DATASET …` compares. Anything that is not a subcommand's name goes to `compute`, so every
    existing command line (and `accelkit stats --help`) means what it meant; a dataset folder
    named like a subcommand is given as ./check."""

    def parse_args(self, ctx, args):
        if not args or args[0] not in self.commands:
            args = ["compute", *args]
        return super().parse_args(ctx, args)


def register(app: typer.Typer) -> None:
    stats = typer.Typer(
        cls=StatsGroup,
        add_completion=False,
        pretty_exceptions_enable=False,
        rich_markup_mode=None,
        help="Normalization statistics of robot datasets; `stats check` compares stored ones,"
        " `stats diff` two statistics files.",
    )
    stats.command("compute", hidden=True)(stats_command)
    stats.command("check")(check_command)
    stats.command("diff")(diff_command)
    app.add_typer(stats, name="stats")
    app.command("sample-dataset")(sample_dataset_command)
