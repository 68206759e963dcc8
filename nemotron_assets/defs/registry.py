"""The registry: every pipeline, in the order a blend is built.

Each pipeline is a folder (``defs/<pipeline>/``) whose pipeline.py registers one `Pipeline` (core/pipeline.py) here.
The code location, the automation, the command line, ``status`` and ``verify`` only iterate over this list; a
pipeline later in it may use the assets of the ones before it (sources -> pretraining, Harmony curation -> scoring,
packed SFT; all of them -> the Hugging Face export, which only the ``export`` command builds).
"""

from nemotron_assets.core.pipeline import Pipeline
from nemotron_assets.defs.export.pipeline import PIPELINE as EXPORT
from nemotron_assets.defs.harmony.pipeline import PIPELINE as HARMONY
from nemotron_assets.defs.jsonl.pipeline import PIPELINE as JSONL
from nemotron_assets.defs.pretrain.pipeline import PIPELINE as PRETRAIN
from nemotron_assets.defs.scoring.pipeline import PIPELINE as SCORING
from nemotron_assets.defs.sft.pipeline import PIPELINE as SFT
from nemotron_assets.defs.sources.pipeline import PIPELINE as SOURCES

PIPELINES: list[Pipeline] = [SOURCES, PRETRAIN, HARMONY, SCORING, JSONL, SFT, EXPORT]
