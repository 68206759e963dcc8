"""Where the scores of candidate pools live under a base folder (``<blend>`` or ``<blend>/samples/<sample>``)::

    <base>/scores/nll/<pool>/part-NNNNN.parquet       NLL of each row of one pool part
    <base>/scores/embedding/<view>/<pool>/part-NNNNN.parquet  one vector per row of a view part
    <base>/scores/near_duplicates.parquet|.md         pairs of rows above the cosine threshold
    <base>/pools/<pool>_easy|_hard|_diverse/part-00000.parquet  selections, laid out as pools (+ .meta/manifest.json)

Every output's receipt is in the ``.receipts/`` folder beside it (``part-00000`` -> ``.receipts/part-00000.json``,
core/records.py ``receipt_path``), so each folder of scores holds only Parquet files.
"""

from nemotron_assets.defs.harmony.layout import PoolPartKey


def nll_scores_path(base: str, key: PoolPartKey) -> str:
    """``<base>/scores/nll/<pool>/part-NNNNN.parquet``: the NLL of every row of one pool part."""
    return f"{base}/scores/nll/{key.pool}/part-{key.part:05d}.parquet"


def embedding_scores_path(base: str, view: str, pool: str, part: int = 0) -> str:
    """``<base>/scores/embedding/<view>/<pool>/part-NNNNN.parquet``: one vector per row of a view part."""
    return f"{base}/scores/embedding/{view}/{pool}/part-{part:05d}.parquet"


def near_duplicates_path(base: str) -> str:
    """``<base>/scores/near_duplicates.parquet`` (pairs) beside ``near_duplicates.md`` (the summary)."""
    return f"{base}/scores/near_duplicates.parquet"
