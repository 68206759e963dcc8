"""The export to the Hugging Face Hub: a blend's pools, packed SFT and JSONL as one folder that
``datasets.load_dataset(folder, config)`` reads, with a dataset card; built only by ``python -m nemotron_assets
export``, optionally pushed.

sets.py (what is exported: configs, splits, files, and what the card says of them), step.py (the folder, on the step
skeleton), assets.py (the asset ``<blend>/hf_export``), pipeline.py, push.py (create the repo, upload the folder),
lineage.py. The card's format is formats/hf_card.py.
"""
