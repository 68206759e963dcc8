"""The ``status`` and ``verify`` commands' reports: every pipeline of the registry says its part.

``status`` shows, per blend, one table per pipeline section (core/status.py says what done, stale, failed and
missing mean): the shards of each dataset (Megatron, Harmony, JSONL), then the other outputs of each pipeline
(post-training outputs, packed SFT, scores), then the samples built. ``--json`` gives the same as one document:
``datasets`` holds every shard row, ``outputs`` every other output. ``verify`` prints one line per problem: the file at
fault, and why.
"""

from dataclasses import asdict, dataclass, field
from pathlib import Path

import dagster as dg

from nemotron_assets.core.blend import Blend
from nemotron_assets.core.layout import check_sample, samples_dir
from nemotron_assets.core.pipeline import StatusRequest
from nemotron_assets.core.status import (
    KEPT_NOT_ASKED,
    NOT_IN_BLEND,
    RECORDED,
    SHOWN_KEYS,
    DatasetStatus,
    OutputStatus,
    Plans,
    Problem,
    StatusSection,
)
from nemotron_assets.core.storage import Storage
from nemotron_assets.defs.registry import PIPELINES
from nemotron_assets.defs.sources.current import CurrentPlans


@dataclass
class SampleStatus:
    sample: str
    sections: list[StatusSection]

    @property
    def datasets(self) -> list[DatasetStatus]:
        return [d for section in self.sections for d in section.datasets]


@dataclass
class BlendStatus:
    blend: str
    sections: list[StatusSection] = field(default_factory=list)
    samples: list[SampleStatus] = field(default_factory=list)
    error: str = ""  # the blend file cannot be used: nothing else could be checked

    @property
    def datasets(self) -> list[DatasetStatus]:
        return [d for section in self.sections for d in section.datasets]

    @property
    def outputs(self) -> list[OutputStatus]:
        return [o for section in self.sections for o in section.outputs]

    def as_json(self) -> dict:
        return {"blend": self.blend, "error": self.error,
                "datasets": [asdict(d) for d in self.datasets], "outputs": [asdict(o) for o in self.outputs],
                "sections": [{"title": s.title, "note": s.note, "error": s.error} for s in self.sections],
                "samples": [{"sample": s.sample, "datasets": [asdict(d) for d in s.datasets]} for s in self.samples]}


def collect_status(instance: dg.DagsterInstance, store: Storage, blend: Blend, blend_file: Path | None = None
                   ) -> BlendStatus:
    """The blend's status, pipeline by pipeline; with ``blend_file``, shards are judged against the input files as
    they are now (defs/sources/current.py), else against the recorded plans."""
    report = BlendStatus(blend.name)
    pipelines = [p for p in PIPELINES if p.applies(blend)]
    for pipeline in pipelines:
        report.sections += pipeline.status(StatusRequest(instance, store, blend, plans_of=_plans(blend_file)))
    for sample in sample_names(store, blend.name):
        request = StatusRequest(instance, store, blend, sample, plans_of=_plans(blend_file))
        report.samples.append(SampleStatus(sample, [s for p in pipelines for s in p.status(request)]))
    return report


def collect_problems(instance: dg.DagsterInstance, store: Storage, blend: Blend, blend_file: Path | None = None
                     ) -> list[Problem]:
    """Every problem of the full build of ``blend`` (samples are not verified), pipeline by pipeline; with
    ``blend_file``, input files that changed since their dataset was planned too."""
    plans_of = _plans(blend_file)
    return [problem for pipeline in PIPELINES if pipeline.applies(blend)
            for problem in pipeline.problems(instance, store, blend, plans_of)]


def _plans(blend_file: Path | None) -> Plans:
    return CurrentPlans(blend_file) if blend_file is not None else RECORDED


def sample_names(store: Storage, blend: str) -> list[str]:
    """The samples built for a blend (folders under ``<blend>/samples/`` named like a sample)."""
    names = []
    for name in store.list_dirs(samples_dir(blend)):
        try:
            names.append(check_sample(name))
        except ValueError:
            continue  # not ours
    return names


# --- formatting -------------------------------------------------------------------------------------------------
def format_status(report: BlendStatus) -> str:
    """Per blend: a table per section, the keys of what is not done, then the samples."""
    if report.error:
        return f"blend {report.blend}: cannot be checked: {report.error}"
    lines = [f"blend {report.blend}"]
    for section in report.sections:
        lines.append(f"  {section.title}:" + (f" {section.note}" if section.note else ""))
        if section.error:
            lines.append(f"    cannot be checked: {section.error}")
            continue
        if section.datasets:
            lines += _table(section.datasets, section.columns)
            for d in section.datasets:
                lines.append(f"  {d.dataset}: {d.note or d.outputs}")
                lines += _not_done(d, "    ")
        lines += _outputs_table(section.outputs)
    for sample in report.samples:
        datasets = sample.datasets
        done, planned = sum(d.done for d in datasets), sum(d.planned for d in datasets)
        lines.append(f"  sample {sample.sample}: {done}/{planned} shard(s) done")
        for section in sample.sections:
            if section.note:
                lines.append(f"    {section.title}: {section.note}")
        for d in datasets:
            if d.note:
                lines.append(f"    {d.dataset}: {d.note}")
            lines += _not_done(d, "    ")
    return "\n".join(lines)


def _total(datasets: list[DatasetStatus], name: str) -> int:
    values = [getattr(d, name) for d in datasets]
    return sum(len(v) if isinstance(v, (list, dict)) else v for v in values)


def _table(datasets: list[DatasetStatus], columns: tuple[str, ...]) -> list[str]:
    header = ("dataset", "split", *columns)
    rows = [(d.dataset, d.split, *(_total([d], name) for name in columns)) for d in datasets]
    rows.append(("total", "", *(_total(datasets, name) for name in columns)))
    cells = [header] + [tuple(f"{v:,}" if isinstance(v, int) else v for v in row) for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    return ["  " + "  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths))).rstrip()
            for row in cells]


def _outputs_table(outputs: list[OutputStatus]) -> list[str]:
    lines = []
    kept = [o for o in outputs if o.state == NOT_IN_BLEND]
    outputs = [o for o in outputs if o.state != NOT_IN_BLEND]
    for asset in dict.fromkeys(o.asset for o in outputs):
        mine = [o for o in outputs if o.asset == asset]
        done = [o for o in mine if o.state == "done"]
        counts: dict[str, int] = {}
        for output in done:
            for label, value in (output.counts or {"rows": output.rows}).items():
                counts[label] = counts.get(label, 0) + value
        shown = "".join(f", {value:,} {label}" for label, value in counts.items())
        lines.append(f"  {asset:<16} {len(done)}/{len(mine)} done{shown}")
        for state in ("stale", "missing"):
            keys = [o for o in mine if o.state == state]
            if keys:
                more = f" and {len(keys) - SHOWN_KEYS} more" if len(keys) > SHOWN_KEYS else ""
                lines.append(f"    {state}: {', '.join(o.key or asset for o in keys[:SHOWN_KEYS])}{more} "
                             f"({keys[0].reason})")
    for asset in dict.fromkeys(o.asset for o in kept):
        keys = [o.key or asset for o in kept if o.asset == asset]
        lines.append(f"  {asset:<16} not in the blend: {', '.join(keys)} ({KEPT_NOT_ASKED})")
    return lines


def _not_done(d: DatasetStatus, indent: str) -> list[str]:
    lines = []
    for label, keys in (("stale", list(d.stale)), ("failed", d.failed), ("missing", d.missing)):
        if keys:
            more = f" and {len(keys) - SHOWN_KEYS} more" if len(keys) > SHOWN_KEYS else ""
            why = ""
            if label == "stale":
                why = f" ({d.stale[keys[0]]})"
            elif label == "failed":
                why = f" ({d.failed_because.get(keys[0]) or 'its run failed'})"
            lines.append(f"{indent}{label}: {', '.join(keys[:SHOWN_KEYS])}{more}{why}")
    return lines


def status_json(reports: list[BlendStatus], orphaned_staging: list) -> dict:
    """The document of ``status --json`` (and of ``nemotron_assets.status``)."""
    return {"blends": [r.as_json() for r in reports], "orphaned_staging": [asdict(o) for o in orphaned_staging]}
