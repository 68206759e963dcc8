"""The pretraining pipeline: text datasets -> Megatron ``.bin``/``.idx`` shards -> ``blend.json``.

assets.py (the two assets and their steps), shard.py (one shard: its inputs and its build), build.py (read ->
tokenize -> write), checks.py, blend_files.py, layout.py, status.py (status and verify), lineage.py.
"""
