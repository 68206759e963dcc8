"""The pipelines: one folder each (Dagster's convention for a project's definitions), holding that pipeline's
assets, steps, status rows, verify checks and lineage. registry.py lists them.
"""
