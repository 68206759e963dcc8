"""Move an output written before the ``.receipts/`` and ``.meta/`` folders (issue 27) to today's places.

Before, a receipt lay beside its files (``<folder>/<name>.json``) and so did the files a trainer does not read
(``duplicates.parquet``, a pool's ``manifest.json``, a packed shard's ``.samples.parquet``), so a trainer pointed at
the folder read them too. Today (core/records.py)::

    <folder>/<name>.json                        ->  <folder>/.receipts/<name>.json
    harmony/<dataset>/duplicates.parquet        ->  harmony/<dataset>/.meta/duplicates.parquet
    pools/<pool>/manifest.json                  ->  pools/<pool>/.meta/manifest.json      (selections too)
    sft/<split>/shard_NNNNN.samples.parquet     ->  sft/<split>/.meta/shard_NNNNN.samples.parquet

`upgrade` is the first thing the step skeleton does for an output (core/step.py ``check``), so every entry point
moves what it is about to judge, and nothing else: the side files are renamed (locally an atomic rename that keeps
the modification time; on S3 a copy), the receipt is rewritten with their new names and deleted at its old place.
The files' bytes do not change, nor the receipt's inputs, so an output that was up to date still is and is not
built again. Until then ``status`` and ``verify`` read the old places (records.py ``stored_path``) and write nothing.

Each step is safe to interrupt: a side file already moved is found at its new place the next time; the old receipt
is deleted before the new one is written, so at worst the output has no receipt and is built again.
"""

from nemotron_assets.core.records import (
    META_DIR,
    Receipt,
    legacy_path,
    output_path,
    parse_receipt,
    receipt_path,
)
from nemotron_assets.core.storage import Storage

#: The files each kind of output (the receipt's ``kind``) kept beside its data, by the name the old receipt gives
#: them. Each moves into ``.meta/`` under its own file name. The kinds are the strings old receipts hold.
SIDE_FILES = {
    "harmony-dedup/1": (".parquet",),  # harmony/<dataset>/duplicates.parquet
    "candidate-pool/1": ("manifest.json",),
    "selected_pool": ("manifest.json",),
    "sft_packed": (".samples.parquet",),
}


def upgrade(store: Storage, prefix: str) -> bool:
    """Move the output at ``prefix`` to today's places if its receipt is at the old one; True if it did."""
    path = receipt_path(prefix)
    legacy = legacy_path(path)
    if not store.exists(legacy):  # the one request for an output of today's layout, or never built
        return False
    receipt = parse_receipt(store.read_bytes(legacy))
    if receipt is None or store.exists(path):  # not done, or superseded: keep the data folder clean
        store.delete(legacy)
        return True
    renamed = {name: today_name(prefix, receipt.kind, name) for name in receipt.files}
    committed = dict(receipt.committed)
    for name, new in renamed.items():
        if new != name:
            committed[new] = _move(store, output_path(prefix, name), output_path(prefix, new),
                                   receipt.committed.get(name))
            committed.pop(name, None)
    store.delete(legacy)
    moved = Receipt(receipt.kind, receipt.key, receipt.inputs, {renamed[n]: f for n, f in receipt.files.items()},
                    receipt.stats, committed, receipt.extra)
    store.write_bytes(path, moved.to_bytes())
    return True


def today_name(prefix: str, kind: str, name: str) -> str:
    """The name a receipt gives today to the file an old receipt of ``kind`` named ``name``."""
    if name not in SIDE_FILES.get(kind, ()):
        return name
    return f"{META_DIR}/{output_path(prefix, name).rpartition('/')[2]}"


def _move(store: Storage, old: str, new: str, stamp: str | None) -> str | None:
    """Move one side file; returns the stamp its receipt records at the new place. The stamp is taken again only
    when the file was as committed (its stamp unchanged): a file changed since keeps the old stamp, so it is still
    hashed and found changed."""
    if not store.exists(old):  # moved by an interrupted upgrade, or gone (then the output is missing)
        return stamp
    unchanged = store.stamp(old) == stamp
    store.move(old, new)
    return store.stamp(new) if unchanged else stamp
