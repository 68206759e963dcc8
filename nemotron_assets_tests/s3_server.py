"""A real S3-compatible server for tests: moto's standalone server as a separate process on loopback."""

import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def moto_server(port: int | None = None) -> Iterator[str]:
    """Start ``moto_server`` and yield its endpoint URL; stop it afterwards."""
    port = port or free_port()
    executable = Path(sys.executable).with_name("moto_server")
    process = subprocess.Popen([str(executable), "-H", "127.0.0.1", "-p", str(port)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    endpoint = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.5):
                break
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"moto_server did not start on port {port}")
            time.sleep(0.1)
        yield endpoint
    finally:
        process.terminate()
        process.wait(timeout=10)


def s3_environment(endpoint: str) -> dict[str, str]:
    return {"AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1"}


def make_bucket(endpoint: str, bucket: str) -> None:
    import boto3

    env = s3_environment(endpoint)
    boto3.client("s3", endpoint_url=endpoint, aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
                 aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
                 region_name=env["AWS_DEFAULT_REGION"]).create_bucket(Bucket=bucket)


def apply_environment(monkeypatch, endpoint: str) -> None:
    for name, value in s3_environment(endpoint).items():
        monkeypatch.setenv(name, value)
    os.environ.pop("AWS_PROFILE", None)
