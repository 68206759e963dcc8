"""The shard checks: re-read a committed shard from storage, independently of how it was written.

Used by the asset checks of ``pretrain_shard`` (shown in the UI per partition) and by ``verify``. Each check
returns "" when it passes, else what is wrong.
"""

import numpy as np

from nemotron_assets.core.records import read_receipt, receipt_path, stored_path
from nemotron_assets.core.storage import Storage
from nemotron_assets.formats.megatron import FormatError, Index, check_bin_size, parse_index

SCAN_BYTES = 16 << 20

BIN_IDX_CONSISTENT = "bin_idx_consistent"
TOKEN_IDS_BELOW_VOCAB = "token_ids_below_vocab"
COUNTS_MATCH_METADATA = "counts_match_metadata"
CHECKS = {
    BIN_IDX_CONSISTENT: "magic, version, dtype, pointers = cumulative lengths, document indices, .bin size",
    TOKEN_IDS_BELOW_VOCAB: "every token id < the tokenizer's vocabulary size",
    COUNTS_MATCH_METADATA: "documents/tokens in the files equal the receipt and the materialization metadata",
}


def check_shard(store: Storage, prefix: str, recorded: dict | None) -> dict[str, str]:
    """Run every check on the shard at ``prefix``; ``recorded`` is its materialization metadata (None: none). A
    shard of several text fields has one ``.bin``/``.idx`` pair per field (its receipt's ``stats["fields"]``, each
    with the suffix of its names), every pair checked; the materialization's counts are the first field's."""
    result = dict.fromkeys(CHECKS, "")
    receipt_file = stored_path(store, receipt_path(prefix))  # at its legacy place in a tree not moved yet
    receipt = read_receipt(store, prefix)
    datasets = shard_datasets(prefix, receipt.stats if receipt is not None else {})
    for path in [*(p for dataset, _ in datasets for p in (dataset + ".idx", dataset + ".bin")), receipt_file]:
        if not store.exists(path):
            return {check: f"{store.url(path)} does not exist" for check in result}
    if receipt is None:
        return {check: f"{store.url(receipt_file)} is not a readable receipt" for check in result}
    vocab_size = int(receipt.stats["vocab_size"])
    for position, (dataset, stats) in enumerate(datasets):
        try:
            index = parse_index(store.read_bytes(dataset + ".idx"), name=store.url(dataset + ".idx"))
            check_bin_size(index, store.size(dataset + ".bin"), name=store.url(dataset + ".bin"))
        except FormatError as exc:
            return {check: str(exc) for check in result}
        named = "" if len(datasets) == 1 else f"{store.url(dataset)}: "
        highest = max_token_id(store, dataset + ".bin", index)
        if highest is not None and highest >= vocab_size and not result[TOKEN_IDS_BELOW_VOCAB]:
            result[TOKEN_IDS_BELOW_VOCAB] = f"{named}token id {highest} >= vocab size {vocab_size}"
        problem = _count_problem(index, stats, recorded if position == 0 else None)
        if problem and not result[COUNTS_MATCH_METADATA]:
            result[COUNTS_MATCH_METADATA] = named + problem
    return result


def shard_datasets(prefix: str, stats: dict) -> list[tuple[str, dict]]:
    """(prefix, counts) of each Megatron dataset of the shard whose receipt has ``stats``: the shard's prefix, or
    one per text field of a list ``text_field``."""
    fields = stats.get("fields")
    if not fields:
        return [(prefix, stats)]
    return [(prefix + field["suffix"], field) for field in fields.values()]


def max_token_id(store: Storage, relative: str, index: Index, block_bytes: int = SCAN_BYTES) -> int | None:
    """The highest token id in a .bin, streamed in ``block_bytes`` blocks read into one reused buffer."""
    dtype = index.dtype.numpy
    buffer = np.empty(block_bytes // dtype.itemsize, dtype=dtype)
    raw = memoryview(buffer).cast("B")
    highest, pending = None, 0  # pending: bytes of a token split across two reads (S3 streams may do that)
    with store.open(relative) as stream:
        while read := stream.readinto(raw[pending:]):
            filled = pending + read
            whole = filled - filled % dtype.itemsize
            if whole:
                top = int(buffer[: whole // dtype.itemsize].max())
                highest = top if highest is None else max(highest, top)
            pending = filled - whole
            raw[:pending] = raw[whole:filled]
    return highest


def _count_problem(index: Index, receipt_stats: dict, recorded: dict | None) -> str:
    actual = {"documents": index.num_documents, "tokens": index.num_tokens,
              "empty_documents": int(np.count_nonzero(np.diff(index.document_indices) == 0))}
    sources = [("receipt", receipt_stats)] + ([("materialization", recorded)] if recorded is not None else [])
    for label, values in sources:
        for field, value in actual.items():
            if field in values and int(values[field]) != value:
                return f"{field}: files hold {value:,}, the {label} says {int(values[field]):,}"
    return ""
