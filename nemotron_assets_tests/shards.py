"""Build one pretraining shard in this process, through the step's own path (core/step.py ``ShardRun``), for the
tests that compare its bytes with a reference or watch how it builds."""

from collections.abc import Callable

from nemotron_assets.core.blend import Blend
from nemotron_assets.core.layout import ShardKey
from nemotron_assets.core.step import Outcome, ShardRun
from nemotron_assets.core.storage import Storage
from nemotron_assets.defs.pretrain.shard import PretrainSettings, shard_build
from nemotron_assets.sources.manifest import SourceManifest
from nemotron_assets.tokenize.documents import LoadedTokenizer


def build_one_shard(store: Storage, blend: Blend, manifest: SourceManifest, key: ShardKey,
                    tokenizer: LoadedTokenizer, log: Callable[[str], None] = print, force: bool = False) -> Outcome:
    """Shard ``key`` of ``manifest`` under the blend's folder, tokenized with ``tokenizer`` (the blend's tokenizer
    setting made to name it), in this process."""
    blend = blend.model_copy(update={"tokenizer_model": tokenizer.files.spec,
                                     "tokenizer_revision": tokenizer.files.revision})
    settings = PretrainSettings.of(blend, tokenizer.options.backend)
    build = shard_build(settings, manifest, key, blend.name, settings.tokenizer_identity(), lambda: tokenizer)
    with ShardRun(store, log, force=force, processes=1) as run:
        run.plan({str(key): build})
        return run.outcome(str(key))
