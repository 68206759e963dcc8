"""Settings that come from the environment, in one place.

``NEMOTRON_DATA_ROOT``   storage root: a local folder (default ``./data``) or ``s3://bucket/prefix``
``NEMOTRON_BLENDS_DIR``  folder of blend files (default: ``blends/`` of this checkout)
``AWS_ENDPOINT_URL``     S3-compatible endpoint for an ``s3://`` root (credentials: the usual AWS_* vars)
"""

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


def data_root() -> str:
    """The storage root; a local one made absolute once, so every run process writes to the same folder."""
    root = os.environ.get("NEMOTRON_DATA_ROOT") or "./data"
    return root if "://" in root else str(Path(root).expanduser().resolve())


def blends_dir() -> Path:
    configured = os.environ.get("NEMOTRON_BLENDS_DIR")
    return Path(configured).expanduser().resolve() if configured else REPO_ROOT / "blends"


def s3_endpoint_url() -> str | None:
    return os.environ.get("AWS_ENDPOINT_URL") or None
