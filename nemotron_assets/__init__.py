"""nemotron_assets from Python: the command line's ``materialize``, ``status`` and ``verify``, for pipelines and
notebooks.

    import nemotron_assets

    result = nemotron_assets.materialize("sample", max_rows=500)   # the document of materialize --json, as a dict
    result["blend_json"], result["assets"]["pretrain_shard"]["outputs"]
    nemotron_assets.status("sample")    # the document of status sample --json
    nemotron_assets.verify("sample")    # {"blend": ..., "ok": ..., "problems": [{"path", "reason"}], "skipped": [...]}

``materialize`` runs the same Dagster runs as ``python -m nemotron_assets materialize``, in the same instance
(``DAGSTER_HOME``, default this checkout's ``dagster_home/``), printing the same lines on stderr. It may be called
again in the same process (each call reads the blend files and ``NEMOTRON_*`` settings as they are then) and from
any thread, one call at a time. It leaves signals alone: Ctrl-C raises ``KeyboardInterrupt`` in the
caller, as in any Python code, after the run it stopped has ended failed. A failed run or asset check raises
`MaterializeError`; a bad blend, setting or argument raises before any run, with the message the command line
prints (exit status 2 there).

Importing this package is cheap: Dagster and the pipelines are imported by the first call.
"""

__all__ = ["MaterializeError", "materialize", "status", "verify"]


class MaterializeError(RuntimeError):
    """A ``materialize`` whose runs or asset checks failed. ``str()`` is the located error (dataset, file, line,
    field, the run id); ``document`` is the result, as ``materialize --json`` prints it on failure."""

    def __init__(self, message: str, document: dict) -> None:
        super().__init__(message)
        self.document = document


def materialize(blend: str, *, select: str | list[str] | None = None, scale: str | None = None,
                max_rows: int | None = None, force: bool = False) -> dict:
    """Build ``blend`` (or the assets ``select`` names; a sample with ``scale`` "tiny"/"small" or ``max_rows``)
    and return what the runs made: the document of ``materialize BLEND --json`` (cli/result.py)."""
    from nemotron_assets.cli import _parser
    from nemotron_assets.cli.interrupts import Interrupts
    from nemotron_assets.cli.materialize import materialize_blend
    from nemotron_assets.core import settings

    settings.deployment()  # an unknown NEMOTRON_DEPLOYMENT is an error, as for the command
    args = _parser().parse_args(["materialize", blend])  # the command's defaults for every other option
    args.select = ",".join(select) if isinstance(select, list) else select
    args.scale, args.max_rows, args.force = scale or "full", max_rows, force
    done = materialize_blend(args, Interrupts(handle_signals=False), with_document=True)
    if done.exit_status != 0:
        message = done.document["error"] or "\n".join(
            ["asset check(s) failed:", *(f"  {line}" for line in done.document["failed_checks"])])
        raise MaterializeError(message, done.document)
    return done.document


def status(blend: str) -> dict:
    """The document of ``status BLEND --json``: per dataset its shards planned, done, stale, failed and missing,
    with tokens and rows, and every other output's state."""
    from nemotron_assets.cli import collect_statuses
    from nemotron_assets.cli.reports import status_json

    return status_json(*collect_statuses(blend))


def verify(blend: str) -> dict:
    """``verify BLEND`` as a dict: ``ok`` when every output's files match their receipts; else each problem's file
    (``path``) and ``reason``. ``skipped``: outputs the blend no longer asks for, left alone."""
    from dataclasses import asdict

    from nemotron_assets.cli import collect_verify_problems

    name, problems, skipped = collect_verify_problems(blend)
    return {"blend": name, "ok": not problems, "problems": [asdict(p) for p in problems],
            "skipped": [asdict(p) for p in skipped]}
