"""The scoring pipeline: candidate pools scored by completion-only NLL under a causal LM and by sentence embeddings,
and selections from both (a blend's ``scoring:`` section).

The Dagster side is assets.py, steps.py, inputs.py, parts.py, status.py and lineage.py; the rest is pure code (no
Dagster). The heavy dependencies (torch, transformers, sentence-transformers) are the optional
``scoring`` extra: only `nll`, `embeddings` and the modules that call them import torch, and this package's
``__init__`` imports nothing heavy, so the rest of the platform works without the extra and a blend with
``scoring:`` can be refused early (`require_scoring_extra`).

Modules, in the order a run uses them:

==========================  ==========================================================================================
``settings``                `ScoringSettings`: the blend's ``scoring:`` section (pydantic, no torch)
``extra``                   `require_scoring_extra`: a clear error naming ``pip install -e '.[scoring]'``
``model_files``             `locate_model`: a local folder, a cached hub id (never downloaded) or the bundled
                            all-MiniLM-L6-v2; the revision to record (commit sha or a digest of the files)
``device``                  `choose_device`: CUDA + bf16 when present, else CPU + fp32 on every usable core
``chat_template``           the model folder's own chat template(s), found where transformers looks
``rendering``               pool rows -> ids + trained mask through the SFT renderer (`render_conversations`: the glue)
``samples``                 `scoring_sample`: checks a rendered row, truncates it to ``max_tokens`` (flagged)
``batching``                `plan_batches`: length-sorted, token-budgeted batches with < 10 % padding
``nll``                     `NllScorer`: summed/mean NLL of the trained tokens, output layer only where scored
``nll_parts``               `score_pool_part`: one pool part -> one ``scores/nll`` Parquet part, streamed
``embeddings``              `SentenceEmbedder`: transformers + the folder's pooling config = sentence-transformers
``embedding_parts``         `embed_view_part`: one embedding-view part -> one ``scores/embedding`` Parquet part
``near_duplicates``         pairs above a cosine threshold by blocked matrix products, never the n x n matrix
``selection``               ``<pool>_easy``/``_hard`` by NLL quantile, ``<pool>_diverse`` by greedy k-center
==========================  ==========================================================================================

A pool part through NLL scoring::

    files = locate_model(settings.model, settings.revision)
    device = choose_device(settings.device, dtype=settings.dtype)
    scorer = NllScorer.load(files, device, settings.batch_tokens)
    stats = score_pool_part(pool_part, out_path, ModelRenderer(files), scorer, files, settings.max_tokens)
"""

from nemotron_assets.defs.scoring.extra import require_scoring_extra

__all__ = ["require_scoring_extra"]
