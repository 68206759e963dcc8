"""The Harmony curation pipeline: post-training rows -> normalized Harmony shards -> dedup -> candidate pools ->
embedding views -> the behavior report.

assets.py (the assets and their steps), shard.py (one shard: its inputs and its build), build.py (rows -> Parquet),
dedup.py, pools.py, views.py, report.py, downstream.py (the steps after the shards), layout.py, status.py (status and
verify), lineage.py.
"""
