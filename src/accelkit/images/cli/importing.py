"""`accelkit images import-model PATH`: one call of `accelkit.images.import_model`, rendered as a
table of what was written and checked, or the `--json` envelope."""

from __future__ import annotations

from typing import Annotated

import typer

from accelkit.images.cli.options import JsonOption, emit_json, library, table


def import_model_command(
    path: Annotated[
        str,
        typer.Argument(
            help="A Hugging Face CLIPModel or SiglipModel folder (config.json, model.safetensors,"
            " tokenizer.json, preprocessor_config.json or processor_config.json), or its"
            " snapshot in the Hugging Face cache."
        ),
    ],
    output: Annotated[
        str | None,
        typer.Option(
            "--output",
            "-o",
            help="Folder to write (new or empty). Default: PATH-accelkit beside the folder; for"
            " a Hugging Face cache snapshot, ORG--NAME-COMMIT in accelkit's data folder"
            " (models/), outside the cache.",
        ),
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Make a Hugging Face CLIP or SigLIP folder into the ONNX pair, tokenizer.json and YAML that
    text search loads, checked against transformers' own outputs."""
    report = library().import_model(path, output)
    if as_json:
        emit_json(report.document())
        return
    checks, pre, text = report.checks, report.preprocess, report.text
    rows = [
        ["model", f"{report.kind} {report.name!r}, {report.embedding_dim}-d"],
        ["config", report.files["config"]],
        [
            "images",
            f"{pre['image_size'][0]}x{pre['image_size'][1]} {pre['fit']}, {pre['resample']}"
            " (the processor's, PIL-exact)",
        ],
        [
            "texts",
            f"{text['context_length']} tokens, pad id {text['pad_id']} {text['padding_side']}",
        ],
        ["image cosine", f"{checks['image_min_cosine']:.6f} (lowest of {len(checks['images'])})"],
        ["text cosine", f"{checks['text_min_cosine']:.6f} (lowest of {checks['texts']})"],
        ["vs processor", f"{checks['preprocess_min_cosine']:.6f} (lowest, as configured)"],
        ["speed-ups on", f"{checks['preprocess_speedups_min_cosine']:.6f} (measured, not a gate)"],
        *[["note", note] for note in report.notes],
    ]
    table(f"imported into {report.output}", ["field", "value"], rows)
