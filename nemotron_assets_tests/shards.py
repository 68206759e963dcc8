"""Build one pretraining shard in this process, through the step's own path (core/step.py ``ShardRun``), for the
tests that compare its bytes with a reference or watch how it builds."""

from collections.abc import Callable
from pathlib import Path

from nemotron_assets.core.blend import Blend
from nemotron_assets.core.layout import ShardKey
from nemotron_assets.core.step import Outcome, ShardRun
from nemotron_assets.core.storage import Storage
from nemotron_assets.defs.pretrain.layout import shard_prefix
from nemotron_assets.defs.pretrain.shard import PretrainSettings, shard_build
from nemotron_assets.defs.sources.manifest import build_manifest
from nemotron_assets.sources.manifest import SourceManifest
from nemotron_assets.tokenize.documents import LoadedTokenizer, load_tokenizer


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


def build_every_shard(out: Path, blend: Blend, folder: Path, backend: str = "auto") -> list[str]:
    """Every shard of the blend's first dataset (paths relative to ``folder``) under ``out``, each built by
    `build_one_shard` with the tokenizer the pretraining step loads for this blend (``PretrainSettings``); their
    prefixes, in order."""
    store = Storage(str(out))
    entry = blend.entries()[0]
    manifest = build_manifest(blend, entry, folder)
    settings = PretrainSettings.of(blend, backend)
    tokenizer = load_tokenizer(settings.tokenizer_model, settings.tokenizer_revision, settings.documents,
                               settings.tiktoken)
    prefixes = []
    for shard in manifest.shards:
        key = ShardKey(entry.name, shard.index)
        build_one_shard(store, blend, manifest, key, tokenizer, log=lambda _: None)
        prefixes.append(store.url(shard_prefix(blend.name, key)))
    return prefixes
