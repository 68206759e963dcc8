"""The JSONL pipeline: datasets with a ``transform`` -> JSONL files per train/valid/test split -> the manifest
NeMo-RL reads.

assets.py (the two assets and their steps), shard.py (one shard's inputs and build; the manifest step), build.py
(rows -> transform -> files), files.py (reading the files back), layout.py, status.py (status and verify),
lineage.py.
"""
