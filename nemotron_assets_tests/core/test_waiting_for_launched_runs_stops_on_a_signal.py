"""Waiting for launched runs (the cluster's Ray jobs) stops once the command has seen a signal, even when the
``KeyboardInterrupt`` Python's handler raised was swallowed wherever it landed: the wait asks the command's signal
watcher at every poll, then asks the launcher to stop the runs still going. A real instance (sqlite, Dagster's
default launcher) holds a run that never ends."""

import time

import dagster as dg
import pytest

from nemotron_assets.core.runs import wait_for_runs

RUN_ID = "0badc0de-0000-4000-8000-000000000000"


def test_a_signal_the_watcher_saw_stops_the_wait_and_the_runs_still_going(tmp_path):
    with dg.DagsterInstance.local_temp(str(tmp_path)) as instance:
        instance.add_run(dg.DagsterRun(job_name="never_ends", run_id=RUN_ID, status=dg.DagsterRunStatus.STARTED))
        polls = []

        def stopping() -> str | None:  # what cli/interrupts.py's watcher says: nothing, then the first signal
            polls.append(time.monotonic())
            return "SIGINT" if len(polls) >= 3 else None

        with pytest.raises(KeyboardInterrupt, match="SIGINT"):
            wait_for_runs(instance, {RUN_ID: ()}, poll_seconds=0.05, stopping=stopping, timeout=5)

        assert len(polls) == 3  # stopped at the poll that saw the signal, not at the timeout
        assert instance.get_run_by_id(RUN_ID).status == dg.DagsterRunStatus.CANCELING  # the launcher was asked


def test_without_a_signal_the_wait_goes_on_until_the_runs_end(tmp_path):
    with dg.DagsterInstance.local_temp(str(tmp_path)) as instance:
        instance.add_run(dg.DagsterRun(job_name="ends", run_id=RUN_ID, status=dg.DagsterRunStatus.STARTED))
        polls = []

        def stopping() -> None:
            polls.append(1)
            if len(polls) == 3:  # the run ends meanwhile
                instance.handle_run_event(RUN_ID, dg.DagsterEvent(
                    event_type_value=dg.DagsterEventType.RUN_SUCCESS.value, job_name="ends", message="done"))

        [outcome] = wait_for_runs(instance, {RUN_ID: ("wiki",)}, poll_seconds=0.05, stopping=stopping, timeout=5)

        assert outcome.success and outcome.partitions == ("wiki",)
        assert len(polls) == 3
