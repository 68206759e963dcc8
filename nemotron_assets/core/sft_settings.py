"""The blend's ``holdout:`` and ``sft:`` sections, validated when the blend loads (pure pydantic, no heavy imports).

```yaml
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
```

What each key does is in ``sft/__init__.py`` and docs/architecture.md §4.4. Which settings change which files is
decided by the assets' receipts: rendering depends only on the template and tokenizer; holdout, weights, selection
and packing only re-plan and re-pack.
"""

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from nemotron_assets.formats.packing import ALGORITHMS, DEFAULT_PACK_SIZE, DEFAULT_PACK_WINDOW
from nemotron_assets.formats.splits import Holdout

BUILTIN_TEMPLATES = ("harmony", "chatml")
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
    pack_size: int = Field(DEFAULT_PACK_SIZE, ge=2, description="Positions per bin: sum(len - 1) <= pack_size.")
    packing: Literal[ALGORITHMS] = Field("first_fit_shuffle", description="Bin packing algorithm.")  # type: ignore[valid-type]
    pack_window: int = Field(DEFAULT_PACK_WINDOW, ge=1, description="Samples packed together; bounds memory.")
    pad_to_multiple: int = Field(1, ge=1, description="Megatron-Bridge's pad_seq_to_mult (context parallelism).")
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
    def _pad_fits(self) -> "SftSettings":
        if self.pad_to_multiple > self.pack_size:
            raise ValueError(f"pad_to_multiple ({self.pad_to_multiple}) exceeds pack_size ({self.pack_size})")
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
