"""The sources pipeline: every dataset of a blend resolved to a manifest of its files and a plan of its shards.

``<blend>/source_split`` (assets.py) comes first for every blend; the shard assets of the other pipelines read its
manifests. The sensor ``<blend>__new_source_files`` (automation.py) re-plans a dataset whose files changed.
"""
