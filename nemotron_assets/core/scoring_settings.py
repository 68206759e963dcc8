"""The blend's ``scoring:`` section: which model scores which pools, and how.

```yaml
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

Each scored pool gives the selections ``<pool>_easy`` and ``<pool>_hard`` (and ``<pool>_diverse`` with
``diverse_k``): pools of their own, which ``sft.from`` may name (`ScoringSettings.selections`).

Nothing here imports torch: a blend is validated before anything heavy loads (`extra.require_scoring_extra`).
"""

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from nemotron_assets.core.pool_names import POOL_NAMES
from nemotron_assets.defs.scoring.model_files import DEFAULT_EMBEDDING_MODEL

EASY, HARD, DIVERSE = "easy", "hard", "diverse"


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
        unknown = [p for p in pools if p not in POOL_NAMES]
        if unknown:
            raise ValueError(f"unknown pool(s) {', '.join(unknown)} (pools: {', '.join(POOL_NAMES)})")
        repeated = sorted({p for p in pools if pools.count(p) > 1})
        if repeated:
            raise ValueError(f"pool(s) listed twice: {', '.join(repeated)}")
        return pools

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


def split_selection(name: str) -> tuple[str, str]:
    """``tool_use_easy`` -> (``tool_use``, ``easy``); `ValueError` for a name that is no selection."""
    pool, _, kind = name.rpartition("_")
    if kind not in (EASY, HARD, DIVERSE) or pool not in POOL_NAMES:
        raise ValueError(f"not a selected pool: {name!r} (expected <pool>_easy, <pool>_hard or <pool>_diverse)")
    return pool, kind
