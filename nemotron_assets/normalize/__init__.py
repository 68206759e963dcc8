"""Raw rows of each dataset family -> canonical conversations -> Harmony text + metadata (docs/architecture.md §4.3).

Pure code: no Dagster. `families.normalize_row` is the entry point. One small module per family reads its own
columns (``chat.py`` holds what the chat-style families share) into a `base.NormalizedRow` whose conversation is in
canonical OpenAI form (``canonical.py``); ``to_harmony.py`` turns that form into Harmony messages and
``record.py`` renders the text and the shard columns.
"""
