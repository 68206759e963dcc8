"""The packed SFT pipeline: normalized Harmony rows -> rendered, tokenized, masked samples -> a plan of bins ->
Megatron-Bridge packed Parquet (and NeMo's .npy) -> the manifest a trainer is pointed at.

assets.py (the four assets), samples_step.py + batch_render.py + render_pool.py (rendering on every core),
plan_step.py, pack_step.py + pack_checks.py, manifest_step.py, inputs.py (what decides each output's bytes),
samples_file.py, stats.py, layout.py, status.py (status and verify), lineage.py. The rendering itself is the chat/
library; the bin packing and the packed files are formats/packing.py and formats/packed_sft.py.
"""
