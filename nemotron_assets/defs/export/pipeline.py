"""The export pipeline as the registry sees it (core/pipeline.py): one step, built only by the ``export`` command.

``built_by="export"`` keeps it out of ``materialize`` (its default selection, ``--select``), the build sensor and
the schedules; the command line's ``export`` runs it (cli/export.py). No status or verify of its own: the folder's
files are the committed outputs, which those already check.
"""

from nemotron_assets.core.blend import Blend
from nemotron_assets.core.pipeline import Pipeline, Step
from nemotron_assets.defs.export.assets import build_export_assets


def exports_something(blend: Blend) -> bool:
    """A blend with candidate pools, packed SFT or JSONL datasets."""
    return bool(blend.pools() or blend.sft is not None or blend.datasets_of("jsonl"))


PIPELINE = Pipeline(
    name="export",
    applies=exports_something,
    steps=(Step("hf_export", by_dataset=False, built_by="export"),),
    assets=build_export_assets,
)
