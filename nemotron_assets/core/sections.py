"""The blend's post-training sections: ``curation:``, ``holdout:``, ``sft:`` and ``scoring:`` (pure pydantic, no
heavy imports), validated when the blend loads, and the candidate pools' names they refer to.

```yaml
curation: {pools: [tool_use, long_context]}     # or pools: all; builds those pools, their views, the report
holdout: {valid: 0.01, test: 0.01, seed: 42}   # SFT conversations and JSONL rows -> train / valid / test
sft:
  chat_template: harmony             # harmony | chatml | path/to/template.jinja (relative to the blend file)
  tokenizer_model: o200k_harmony     # default: o200k_harmony for harmony, else the blend's tokenizer_model
  pack_size: 4096
  packing: first_fit_shuffle         # first_fit_decreasing | first_fit_shuffle | concatenative
  pack_window: 100000                # samples packed together (bounds memory)
  pad_to_multiple: 1                 # Megatron-Bridge's pad_seq_to_mult
  overlong: drop                     # drop | truncate
  from: all                          # all | [pool, ...]
  used_in: null                      # keep rows whose used_in lists this (or any of these)
  formats: [parquet]                 # [parquet] | [parquet, npy]
  seed: 42                           # first_fit_shuffle's order and fractional repeat weights
  shard_tokens: 16777216             # packed positions per output shard, at most (64 MiB of int32 ids)
scoring:
  model: /models/Llama-3.2-1B-Instruct      # a local Hugging Face folder, or a hub id already in the local cache
  pools: [high_correctness, tool_use]
  batch_tokens: 16384                      # padded tokens per forward pass
  max_tokens: 4096                         # longer rows are truncated (head kept) and flagged
  device: auto                             # auto | cpu | cuda
  dtype: auto                              # auto (fp32 on CPU, bf16 on CUDA) | fp32 | bf16
  select_quantile: 0.2                     # <pool>_easy / <pool>_hard: lowest / highest nll_mean share
  diverse_k: 1000                          # optional <pool>_diverse: greedy k-center on the embeddings
  near_dup_threshold: 0.95                 # cosine at or above which two rows are reported as near-duplicates
```

What each ``sft:`` key does is in docs/architecture.md §4.4; which settings change which files is decided by the
assets' receipts: rendering depends only on the template and tokenizer; holdout, weights, selection and packing only
re-plan and re-pack. A blend builds the candidate pools it asks for and no others: the union of ``curation.pools``,
the pools ``sft.from`` names and ``scoring.pools`` (`asked_pools`); each built pool gets its embedding views, and the
behavior report is built when the blend has a ``curation:`` section. Each scored pool gives the selections
``<pool>_easy`` and ``<pool>_hard`` (and ``<pool>_diverse`` with ``diverse_k``): pools of their own, which
``sft.from`` may name (`ScoringSettings.selections`). The pipelines that use these sections are defs/harmony/,
defs/sft/ and defs/scoring/.
"""

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from nemotron_assets.formats.packing import ALGORITHMS, DEFAULT_PACK_SIZE, DEFAULT_PACK_WINDOW, check_sizes
from nemotron_assets.formats.splits import Holdout

#: The candidate pools (defs/harmony/pools.py holds their predicates), in their fixed order: the partition keys of
#: ``candidate_pool``, and the names ``sft.from`` and ``scoring.pools`` may use.
POOL_NAMES = (
    "high_correctness", "mid_correctness", "low_correctness", "has_correctness_meta", "missing_correctness_meta",
    "math_high_verified_correct", "tool_use", "proof", "reasoning_on", "reasoning_off", "capability_chat",
    "capability_structured_outputs", "long_context",
)

BUILTIN_TEMPLATES = ("harmony", "chatml")


class CurationSettings(BaseModel):
    """``curation:``: the candidate pools to build (with their embedding views) and the behavior report over them."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    pools: Literal["all"] | list[str] = Field(description="all, or a list of candidate pools to build.")

    @field_validator("pools")
    @classmethod
    def _known_unique_pools(cls, pools):
        if pools == "all":
            return pools
        if not pools:
            raise ValueError("pools must be 'all' or a non-empty list of pool names")
        return check_pool_names(pools)

    def pool_names(self) -> tuple[str, ...]:
        return POOL_NAMES if self.pools == "all" else tuple(self.pools)


def check_pool_names(pools: list[str]) -> list[str]:
    """``pools`` when every name is a candidate pool, listed once; `ValueError` naming the others."""
    unknown = [p for p in pools if p not in POOL_NAMES]
    if unknown:
        raise ValueError(f"unknown pool(s) {', '.join(unknown)} (pools: {', '.join(POOL_NAMES)})")
    repeated = sorted({p for p in pools if pools.count(p) > 1})
    if repeated:
        raise ValueError(f"pool(s) listed twice: {', '.join(repeated)}")
    return pools
FORMATS = ("parquet", "npy")
#: A packed shard holds at most ``max(1, shard_tokens // pack_size)`` bins: 16 Mi positions, 64 MiB of int32 ids (a
#: split's shards are cut to even sizes under it: plan_step.shard_bounds). Packing
#: one holds its samples in memory, ~8 bytes a token measured with everything around them (bench_sft_e2e.py: the
#: packing step's process grew 8.3 MB per million tokens), so ~140 MB on top of the process. Measured peaks of the
#: largest process: 710 MB for a 19 M-token shard in the CLI process, 981 MB for a 32 M-token shard in a worker
#: process (bench/README.md): 32 Mi positions came within 5 % of the 1 GiB a step may use. The shard's checks
#: hold the planned shard beside its samples, ~6 bytes a position more (pack_checks._all_pass): 870 MB measured
#: for 12 M-token shards, two of them in one process one after the other.
DEFAULT_SHARD_TOKENS = 16 << 20


class HoldoutSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    valid: float = Field(0.0, ge=0, le=1, description="Share of split keys (first user prompts) sent to valid.")
    test: float = Field(0.0, ge=0, le=1, description="Share of split keys sent to test.")
    seed: int = Field(42, description="Seed of the split hash: another seed gives another, equally stable split.")

    @model_validator(mode="after")
    def _at_most_everything(self) -> "HoldoutSettings":
        if self.valid + self.test > 1:
            raise ValueError(f"valid + test must be <= 1, got {self.valid} + {self.test}")
        return self

    def holdout(self) -> Holdout:
        return Holdout(self.valid, self.test, self.seed)


class SftSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    chat_template: str = Field(description="harmony, chatml, or a .jinja file (absolute, or relative to the blend).")
    tokenizer_model: str | None = Field(None, description="Default: o200k_harmony for harmony, else the blend's.")
    tokenizer_revision: str | None = Field(None, description="Hub revision for a hub-id tokenizer.")
    pack_size: int = Field(DEFAULT_PACK_SIZE, description="Positions per bin: sum(len - 1) <= pack_size.")
    packing: Literal[ALGORITHMS] = Field("first_fit_shuffle", description="Bin packing algorithm.")  # type: ignore[valid-type]
    pack_window: int = Field(DEFAULT_PACK_WINDOW, description="Samples packed together; bounds memory.")
    pad_to_multiple: int = Field(1, description="Megatron-Bridge's pad_seq_to_mult (context parallelism).")
    overlong: Literal["drop", "truncate"] = Field("drop", description="Samples longer than pack_size + 1 tokens.")
    from_: Literal["all"] | list[str] = Field("all", alias="from", description="all, or a list of pools.")
    used_in: str | list[str] | None = Field(None, description="Keep rows whose used_in lists one of these.")
    formats: list[Literal["parquet", "npy"]] = Field(["parquet"], description="[parquet] or [parquet, npy].")
    seed: int = Field(42, description="Seed of first_fit_shuffle's order and of fractional repeat weights.")
    shard_tokens: int = Field(DEFAULT_SHARD_TOKENS, ge=1, description="Packed positions per output shard, at most: "
                              "a shard holds at most max(1, shard_tokens // pack_size) bins.")

    @field_validator("chat_template")
    @classmethod
    def _template(cls, value: str) -> str:
        if value not in BUILTIN_TEMPLATES and not value.endswith((".jinja", ".j2")):
            raise ValueError(f"chat_template must be {' or '.join(BUILTIN_TEMPLATES)}, or a path to a .jinja file, "
                             f"got {value!r}")
        return value

    @field_validator("formats")
    @classmethod
    def _parquet_always(cls, formats: list[str]) -> list[str]:
        if "parquet" not in formats or len(set(formats)) != len(formats):
            raise ValueError(f"formats must be [parquet] or [parquet, npy], got {formats}")
        return formats

    @field_validator("from_")
    @classmethod
    def _some_pool(cls, value):
        if isinstance(value, list) and (not value or len(set(value)) != len(value)):
            raise ValueError(f"from must be 'all' or a non-empty list of distinct pool names, got {value}")
        return value

    @model_validator(mode="after")
    def _sizes(self) -> "SftSettings":
        check_sizes(self.pack_size, self.pack_window, self.pad_to_multiple)  # the rule PackSettings applies too
        return self

    @property
    def bins_per_shard(self) -> int:
        """Bins of one packed output shard at most (a split's shards are cut to even sizes under it)."""
        return max(1, self.shard_tokens // self.pack_size)

    @property
    def used_in_values(self) -> tuple[str, ...]:
        if self.used_in is None:
            return ()
        return (self.used_in,) if isinstance(self.used_in, str) else tuple(self.used_in)


# --- scoring ---------------------------------------------------------------------------------------------------
EASY, HARD, DIVERSE = "easy", "hard", "diverse"
#: The bundled sentence-embedding model (defs/scoring/model_files.py finds it)
DEFAULT_EMBEDDING_MODEL = "all-MiniLM-L6-v2"


class ScoringSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    model: str = Field(description="Causal LM for NLL scores: a local Hugging Face model folder, or a hub id read "
                       "from the local cache (never downloaded at run time).")
    revision: str | None = Field(None, description="Hub revision (branch, tag or sha) for a hub id.")
    pools: list[str] = Field(min_length=1, description="Candidate pools to score.")
    batch_tokens: int = Field(16384, ge=1, description="Padded tokens per forward pass (rows x longest row).")
    max_tokens: int = Field(4096, ge=2, description="Rows longer than this are truncated to their first max_tokens "
                            "tokens and flagged.")
    device: Literal["auto", "cpu", "cuda"] = Field("auto", description="auto: CUDA when present, else CPU.")
    dtype: Literal["auto", "fp32", "bf16"] = Field("auto", description="Precision of both models. auto: fp32 on "
                                                   "CPU (scores independent of batching), bf16 on CUDA; bf16 on a "
                                                   "CPU with AMX is an opt-in several times faster.")
    select_quantile: float = Field(0.2, gt=0, lt=0.5, description="Share of scored rows in <pool>_easy (lowest "
                                   "nll_mean) and in <pool>_hard (highest); below 0.5 so they never overlap.")
    embedding_model: str = Field(DEFAULT_EMBEDDING_MODEL, description="Sentence-embedding model: the bundled "
                                 "all-MiniLM-L6-v2, a local folder, or a cached hub id.")
    diverse_k: int | None = Field(None, ge=1, description="Rows of the optional <pool>_diverse selection.")
    near_dup_threshold: float = Field(0.95, ge=-1, le=1, description="Report pairs with cosine >= this.")

    @field_validator("pools")
    @classmethod
    def _known_unique_pools(cls, pools: list[str]) -> list[str]:
        return check_pool_names(pools)

    @model_validator(mode="after")
    def _row_fits_a_batch(self) -> "ScoringSettings":
        if self.max_tokens > self.batch_tokens:
            raise ValueError(f"max_tokens ({self.max_tokens}) must not exceed batch_tokens ({self.batch_tokens}): "
                             "the longest row has to fit one forward pass")
        return self

    def selections(self) -> list[str]:
        """The selected pools' names, per scored pool in order: ``<pool>_easy``, ``<pool>_hard`` and, with
        ``diverse_k``, ``<pool>_diverse``."""
        kinds = (EASY, HARD, DIVERSE) if self.diverse_k else (EASY, HARD)
        return [f"{pool}_{kind}" for pool in self.pools for kind in kinds]


def asked_pools(curation: CurationSettings | None, sft: SftSettings | None, scoring: ScoringSettings | None
                ) -> tuple[str, ...]:
    """The candidate pools a blend builds, in `POOL_NAMES` order: what ``curation.pools``, ``sft.from`` and
    ``scoring.pools`` name (a selection ``<pool>_easy`` in ``sft.from`` is built from its scored pool)."""
    asked = set(curation.pool_names()) if curation is not None else set()
    if sft is not None and isinstance(sft.from_, list):
        asked.update(pool for pool in sft.from_ if pool in POOL_NAMES)
    if scoring is not None:
        asked.update(scoring.pools)
    return tuple(pool for pool in POOL_NAMES if pool in asked)


def split_selection(name: str) -> tuple[str, str]:
    """``tool_use_easy`` -> (``tool_use``, ``easy``); `ValueError` for a name that is no selection."""
    pool, _, kind = name.rpartition("_")
    if kind not in (EASY, HARD, DIVERSE) or pool not in POOL_NAMES:
        raise ValueError(f"not a selected pool: {name!r} (expected <pool>_easy, <pool>_hard or <pool>_diverse)")
    return pool, kind
