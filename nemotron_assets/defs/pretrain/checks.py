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
    """Run every check on the shard at ``prefix``; ``recorded`` is its materialization metadata (None: none)."""
    result = dict.fromkeys(CHECKS, "")
    receipt_file = stored_path(store, receipt_path(prefix))  # at its legacy place in a tree not moved yet
    for path in (prefix + ".idx", prefix + ".bin", receipt_file):
        if not store.exists(path):
            return {check: f"{store.url(path)} does not exist" for check in result}
    receipt = read_receipt(store, prefix)
    if receipt is None:
        return {check: f"{store.url(receipt_file)} is not a readable receipt" for check in result}
    try:
        index = parse_index(store.read_bytes(prefix + ".idx"), name=store.url(prefix + ".idx"))
        check_bin_size(index, store.size(prefix + ".bin"), name=store.url(prefix + ".bin"))
    except FormatError as exc:
        return {check: str(exc) for check in result}
    vocab_size = int(receipt.stats["vocab_size"])
    highest = max_token_id(store, prefix + ".bin", index)
    if highest is not None and highest >= vocab_size:
        result[TOKEN_IDS_BELOW_VOCAB] = f"token id {highest} >= vocab size {vocab_size}"
    result[COUNTS_MATCH_METADATA] = _count_problem(index, receipt.stats, recorded)
    return result


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
