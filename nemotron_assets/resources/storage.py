"""The storage resource: a local folder or ``s3://bucket/prefix``, chosen by one setting (DESIGN.md 1).

Why a resource and not an IO manager: outputs are large files that steps stream to disk themselves, and a
backfill run covers many partitions; Dagster IO managers pickle returned values and the UPath one refuses
multi-partition runs. Steps stage files locally, the storage commits them atomically, and the asset
returns metadata (``MaterializeResult``), with lineage declared by ``deps``.
"""

import dagster as dg
from pydantic import Field

from nemotron_assets.storage import Storage


class StorageResource(dg.ConfigurableResource):
    root: str = Field(description="Local folder or s3://bucket/prefix that every output goes under.")
    endpoint_url: str | None = Field(None, description="S3-compatible endpoint (e.g. a MinIO or moto server).")

    def get(self) -> Storage:
        return Storage(self.root, endpoint_url=self.endpoint_url)
