"""The storage resource: a local folder or ``s3://bucket/prefix``, chosen by one setting (docs/architecture.md §2).

Why a resource and not an IO manager: outputs are large files that steps stream to disk themselves, and a
backfill run covers many partitions; Dagster IO managers pickle returned values and the UPath one refuses
multi-partition runs. Steps stage files locally, the storage commits them atomically, and the asset
returns metadata (``MaterializeResult``), with lineage declared by ``deps``.

S3 endpoint, credentials and region are set as ``dg.EnvVar``s (``from_environment``): Dagster resolves them in
the run process, and the UI, the run config and the event log carry only the variable names.
"""

import dagster as dg
from pydantic import Field

from nemotron_assets.core import settings
from nemotron_assets.core.storage import Storage


class StorageResource(dg.ConfigurableResource):
    root: str = Field(description="Local folder or s3://bucket/prefix that every output goes under.")
    endpoint_url: str | None = Field(None, description="S3-compatible endpoint (e.g. a MinIO or moto server).")
    aws_access_key_id: str | None = Field(None, repr=False, description="S3 access key id (EnvVar).")
    aws_secret_access_key: str | None = Field(None, repr=False, description="S3 secret access key (EnvVar).")
    region_name: str | None = Field(None, description="S3 region (EnvVar AWS_DEFAULT_REGION).")

    @classmethod
    def from_environment(cls, root: str) -> "StorageResource":
        """The resource for ``root``: an ``s3://`` root reads each AWS variable set at load time as an
        ``EnvVar``; a local root needs none of them."""
        if not root.startswith("s3://"):
            return cls(root=root)
        return cls(root=root, **{field: dg.EnvVar(name) for field, name in settings.s3_environment_names().items()})

    def get(self) -> Storage:
        return Storage(self.root, endpoint_url=self.endpoint_url, key=self.aws_access_key_id,
                       secret=self.aws_secret_access_key, region=self.region_name)
