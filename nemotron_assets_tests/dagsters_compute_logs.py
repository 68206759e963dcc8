"""Dagster's own local compute log manager, which copies a step's captured output with ``tail -F`` processes, under a
name the command line does not put its own in place of (core/runs.py ``terminal_instance``): for a test of what a
user's instance with Dagster's copies shows."""

from dagster._core.storage.local_compute_log_manager import LocalComputeLogManager


class DagstersOwnComputeLogManager(LocalComputeLogManager):
    @classmethod
    def from_config_value(cls, inst_data, config_value) -> "DagstersOwnComputeLogManager":
        return cls(inst_data=inst_data, **config_value)
