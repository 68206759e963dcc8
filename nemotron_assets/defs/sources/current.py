"""The plans ``status`` and ``verify`` judge the shards by: the ones the input files make now.

A shard is up to date only when its receipt matches the input files as they are now, whatever the recorded plan
says. So each dataset is measured again the way ``source_split`` would (manifest.py ``measure_dataset``), without
writing anything: a file with its recorded size and modification time (or S3 ETag) is not read, any other file is
read and hashed. An input appended to, edited, added or removed makes the shards built from it stale, naming the
file; a file restored to what it was makes them done again, with no ``materialize`` in between. ``hf://`` inputs
are pinned to a commit when planned, so their recorded plan stands. A listing that fails leaves the dataset "input
not checked", never done.
"""

from pathlib import Path

from nemotron_assets.core.blend import Blend, DatasetEntry
from nemotron_assets.core.status import Plans, Problem, read_plans
from nemotron_assets.core.storage import Storage
from nemotron_assets.defs.sources.manifest import changed_inputs, measure_dataset, measured_before
from nemotron_assets.sources.errors import InputError
from nemotron_assets.sources.manifest import SourceManifest


class CurrentPlans(Plans):
    """Plans measured from the input files now; ``blend_file`` is where the blend's relative paths start."""

    def __init__(self, blend_file: Path) -> None:
        self.folder = blend_file.parent
        self._changes: dict[str, list[tuple[str, str]]] = {}
        self._not_checked: dict[str, str] = {}
        self._measured: dict[tuple[str, str], SourceManifest] = {}  # (base, dataset) -> measured now, once

    def of(self, store: Storage, blend: Blend, base: str, entries: list[DatasetEntry]
           ) -> dict[str, SourceManifest | Problem]:
        plans = read_plans(store, blend, base, entries)
        for entry in entries:
            recorded = plans[entry.name]
            if isinstance(recorded, Problem) or entry.path.startswith("hf://"):
                continue
            if (base, entry.name) not in self._measured:
                try:
                    self._measured[base, entry.name] = measure_dataset(
                        blend, entry, self.folder, recorded.max_rows,
                        known=measured_before(store, base, entry.name)).manifest
                except (InputError, OSError) as exc:
                    self._not_checked[entry.name] = f"input not checked: {exc}"
                    continue
            now = self._measured[base, entry.name]
            self._changes[entry.name] = changed_inputs(recorded, now)
            plans[entry.name] = now
        return plans

    def input_changes(self, dataset: str) -> list[tuple[str, str]]:
        return self._changes.get(dataset, [])

    def not_checked(self, dataset: str) -> str:
        return self._not_checked.get(dataset, "")
