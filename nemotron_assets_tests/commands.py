"""The command line run here, in the test's process, with a deployment's environment: for the commands a test only
reads with (``status``, ``verify``) after real processes built the tree. A process of its own would cost ~2 s to
start (Python, Dagster, the definitions) and check nothing more."""

import contextlib
import io

import pytest

from nemotron_assets.cli import main

DEPLOYMENT = ("DAGSTER_HOME", "NEMOTRON_DATA_ROOT", "NEMOTRON_BLENDS_DIR")


def command_here(env: dict, *argv: str) -> tuple[int, str, str]:
    """``python -m nemotron_assets <argv>`` run in this process with ``env``'s deployment: (exit status, stdout,
    stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with pytest.MonkeyPatch.context() as patch, contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        for name in DEPLOYMENT:
            patch.setenv(name, env[name])
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()
