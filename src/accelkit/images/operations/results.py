"""What the library API (`accelkit.images.api`) returns: one result object per operation, whose
`document()` is the `result` of the command's `--json` envelope and whose fields the command's
table shows."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from accelkit.images.index.ranking import Cut
from accelkit.images.store import Hit


@dataclass
class EmbedReport:
    """An embedding run: `embedded` vectors of `dim` written to `output` (rows in the order of
    the `inputs` file; with Ray, Parquet `shards`), `failures` by input with their reasons."""

    output: str
    inputs: str | None
    failures_file: str
    embedded: int
    failed: int
    dim: int
    failures: dict[str, str] = field(default_factory=dict)
    shards: int | None = None  # with Ray: how many Parquet files

    def document(self) -> dict[str, Any]:
        out = {
            "output": self.output,
            "inputs": self.inputs,
            "failures_file": self.failures_file,
            "embedded": self.embedded,
            "failed": self.failed,
            "dim": self.dim,
        }
        if self.shards is not None:
            out["shards"] = self.shards
        return {**out, "failures": self.failures}


@dataclass
class InsertReport:
    """An insert of `inputs` ((path, name) pairs) into `collection`: `stored` (input position,
    id) pairs and `failures` (input position → reason)."""

    collection: str
    inputs: list[tuple[str, str]]
    stored: list[tuple[int, str]]
    failures: dict[int, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return bool(self.stored)

    @property
    def problem(self) -> str | None:
        """Why nothing was stored (None when something was)."""
        if self.stored:
            return None
        first = next(iter(self.failures.values()), "no inputs")
        return f"none of the {len(self.inputs)} images could be stored (first: {first})"

    def document(self) -> dict[str, Any]:
        paths = [path for path, _ in self.inputs]
        return {
            "collection": self.collection,
            "inserted": len(self.stored),
            "items": [
                {"input": paths[i], "source": self.inputs[i][1], "id": item_id}
                for i, item_id in self.stored
            ],
            "failures": [{"input": paths[i], "error": e} for i, e in self.failures.items()],
        }


@dataclass
class SearchReport:
    """The `topk` nearest items in `collection` to the image file `query` or to `text`, best
    first; `warnings`: what the store did not apply of the settings (e.g. Milvus Lite's nprobe)."""

    collection: str
    query: str | None
    topk: int
    hits: list[Hit]
    text: str | None = None
    warnings: list[str] = field(default_factory=list)
    cut: Cut | None = None  # the scores before the cuts, what min-score and auto-cut kept

    @property
    def asked(self) -> str:
        """The query as a person reads it: the file, or the words in quotes."""
        return str(self.query) if self.text is None else f'"{self.text}"'

    @property
    def message(self) -> str | None:
        """ "no photo scores above X" when the cut left nothing (else None)."""
        return None if self.cut is None else self.cut.message

    def document(self) -> dict[str, Any]:
        out = {"collection": self.collection, "query": self.query}
        if self.text is not None:
            out["text"] = self.text
        out["results"] = [hit.document() for hit in self.hits]
        if self.cut is not None:
            out.update(cut=self.cut.document(), message=self.message)
        return out


@dataclass
class HealthReport:
    """`status` "ok" or not, and the `model` and `store` sections (a service's own answer
    through `--server`)."""

    report: dict[str, Any]

    @property
    def ok(self) -> bool:
        return self.report["status"] == "ok"

    @property
    def problem(self) -> str | None:
        if self.ok:
            return None
        report = self.report
        problems = [
            f"{s}: {report[s]['error']}"
            for s in ("model", "store")
            if (report.get(s) or {}).get("error")
        ]
        return f"unhealthy: {'; '.join(problems) or report.get('error') or report['status']}"

    @property
    def collections(self) -> list[dict[str, Any]]:
        """Per collection, the index its searches use and the settings ignored."""
        return self.report.get("collections") or []

    def document(self) -> dict[str, Any]:
        return self.report


@dataclass
class ImportReport:
    """A Hugging Face CLIP or SigLIP folder (`source`) written as accelkit loads it into `output`:
    `files` (the ONNX pair, tokenizer.json and the YAML block `config`), the rules read from the
    folder (`preprocess`, `text`), and `checks`: the lowest cosines against transformers' own
    outputs (`image_min_cosine`, `text_min_cosine`) and of accelkit's preprocessing against the
    model's processor (`preprocess_min_cosine`), each at least `min_cosine`, and, measured, the
    latter with the host's speed-ups on (`preprocess_speedups_min_cosine`)."""

    source: str
    output: str
    kind: str
    name: str
    files: dict[str, str]
    preprocess: dict[str, Any]
    text: dict[str, Any]
    embedding_dim: int
    exporter: str
    checks: dict[str, Any]
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def document(self) -> dict[str, Any]:
        from dataclasses import asdict

        return asdict(self)
