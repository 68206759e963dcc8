"""The pretraining pipeline: text datasets -> Megatron ``.bin``/``.idx`` shards -> ``blend.json``.

shard.py (``pretrain_shard``, top to bottom: the asset, what decides a shard's bytes, and the build: read ->
tokenize -> write), assets.py (``megatron_blend``, and both assets of a blend), checks.py, blend_files.py,
layout.py, status.py (status and verify), lineage.py.
"""
