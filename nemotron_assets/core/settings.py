"""Settings that come from the environment, in one place.

``NEMOTRON_DATA_ROOT``   storage root: a local folder (default: ``data/`` of this checkout, like ``blends/`` and
                         ``dagster_home/``, so outputs and run records stay together wherever a command runs from)
                         or ``s3://bucket/prefix``; an ``s3://`` root alone is enough to write every output to S3
``NEMOTRON_BLENDS_DIR``  folder of blend files (default: ``blends/`` of this checkout)
``NEMOTRON_DEPLOYMENT``  ``local`` (default) or ``s3``: both use the sqlite instance in this checkout's
                         ``dagster_home/`` when ``DAGSTER_HOME`` is not set; ``s3`` also insists on an ``s3://``
                         root. ``cluster``: the instance in ``deployments/cluster/`` (Postgres storage from
                         ``NEMOTRON_POSTGRES_URL``, runs launched as Ray jobs at ``NEMOTRON_RAY_ADDRESS``)
``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_DEFAULT_REGION``
                         endpoint, credentials and region for an ``s3://`` root, handed to the storage resource
                         as Dagster ``EnvVar``s (``S3_ENVIRONMENT``): the UI and the run records show the variable
                         names, never their values
"""

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]

DEPLOYMENTS = ("local", "s3", "cluster")
CLUSTER_DAGSTER_HOME = REPO_ROOT / "deployments" / "cluster"
POSTGRES_URL_VARIABLE = "NEMOTRON_POSTGRES_URL"
RAY_ADDRESS_VARIABLE = "NEMOTRON_RAY_ADDRESS"

# StorageResource field -> the standard AWS variable it is read from (through dg.EnvVar, never by value).
S3_ENVIRONMENT = {
    "endpoint_url": "AWS_ENDPOINT_URL",
    "aws_access_key_id": "AWS_ACCESS_KEY_ID",
    "aws_secret_access_key": "AWS_SECRET_ACCESS_KEY",
    "region_name": "AWS_DEFAULT_REGION",
}


class DeploymentError(ValueError):
    """A deployment setting that cannot work; the message names the variable to change."""


def data_root() -> str:
    """The storage root; a local one made absolute once, so every run process writes to the same folder."""
    root = os.environ.get("NEMOTRON_DATA_ROOT") or str(REPO_ROOT / "data")
    return root if "://" in root else str(Path(root).expanduser().resolve())


def blends_dir() -> Path:
    configured = os.environ.get("NEMOTRON_BLENDS_DIR")
    return Path(configured).expanduser().resolve() if configured else REPO_ROOT / "blends"


def s3_endpoint_url() -> str | None:
    return os.environ.get("AWS_ENDPOINT_URL") or None


def deployment() -> str:
    """``NEMOTRON_DEPLOYMENT``, checked: a typo fails loudly (every command, and the code location's load) instead
    of silently running against the wrong instance or storage."""
    name = (os.environ.get("NEMOTRON_DEPLOYMENT") or "local").strip().lower()
    if name not in DEPLOYMENTS:
        raise DeploymentError(f"NEMOTRON_DEPLOYMENT={name!r} is not one of {', '.join(DEPLOYMENTS)}")
    if name == "s3" and not data_root().startswith("s3://"):
        raise DeploymentError(f"NEMOTRON_DEPLOYMENT='s3' needs NEMOTRON_DATA_ROOT=s3://bucket/prefix, "
                              f"got {data_root()!r}")
    return name


def check_cluster_environment(*, need_launcher: bool) -> None:
    """The variables ``deployments/cluster/dagster.yaml`` reads, checked up front with a message that says what
    to set (Dagster's own error would only name the missing variable deep in a config stack trace)."""
    url = os.environ.get(POSTGRES_URL_VARIABLE, "")
    if not url:
        raise DeploymentError(f"NEMOTRON_DEPLOYMENT=cluster needs {POSTGRES_URL_VARIABLE}="
                              "postgresql+psycopg2://USER:PASSWORD@HOST:PORT/DATABASE")
    if not url.startswith("postgresql+psycopg2://"):
        scheme = url.split("://", 1)[0] if "://" in url else "(none)"
        raise DeploymentError(f"{POSTGRES_URL_VARIABLE} must start with postgresql+psycopg2:// (got scheme "
                              f"{scheme!r}; with SQLAlchemy 2.1 a bare postgresql:// selects psycopg 3, which is not "
                              "installed)")
    if need_launcher and not os.environ.get(RAY_ADDRESS_VARIABLE):
        raise DeploymentError(f"NEMOTRON_DEPLOYMENT=cluster needs {RAY_ADDRESS_VARIABLE}: the Ray head's "
                              "job-submission address, e.g. http://HEAD:8265")


def default_dagster_home() -> Path:
    """The instance folder used when ``DAGSTER_HOME`` is unset: for ``local`` and ``s3`` the sqlite instance in
    this checkout's ``dagster_home/`` (an S3 deployment keeps its run records locally; only outputs move); for
    ``cluster`` ``deployments/cluster/`` (Postgres + Ray run launcher)."""
    if deployment() == "cluster":
        return CLUSTER_DAGSTER_HOME
    return REPO_ROOT / "dagster_home"


def s3_environment_names() -> dict[str, str]:
    """The ``S3_ENVIRONMENT`` entries whose variable is set (non-empty) now: only those become ``EnvVar``s, so
    an optional variable left unset (e.g. no custom endpoint on AWS itself) is not a run-time config error."""
    return {field: name for field, name in S3_ENVIRONMENT.items() if os.environ.get(name)}
