"""Raw rows of each dataset family -> Harmony messages + metadata -> normalized shard records (DESIGN.md section 3).

Pure code: no Dagster. `families.normalize_row` is the entry point; `base` holds the record rules, `chat` the
OpenAI-style message conversion most families share, and one small module per family reads its own fields.
"""
