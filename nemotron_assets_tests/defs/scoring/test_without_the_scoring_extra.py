"""Without the scoring extra the platform still imports, and a scoring blend gets the install command."""

import subprocess
import sys

import pytest

from nemotron_assets.defs.scoring import require_scoring_extra
from nemotron_assets.sources.errors import InputError
from nemotron_assets_tests.conftest import REPO
from nemotron_assets_tests.defs.scoring.hide_scoring_extra import HIDE_HEAVY


def test_require_scoring_extra_names_the_missing_packages_and_the_command(monkeypatch):
    require_scoring_extra()  # everything is installed in the test environment
    monkeypatch.setitem(sys.modules, "torch", None)
    monkeypatch.setitem(sys.modules, "sentence_transformers", None)
    with pytest.raises(InputError) as raised:
        require_scoring_extra()
    assert str(raised.value) == ("field 'scoring': scoring needs the optional 'scoring' dependencies, and torch, "
                                 "sentence-transformers are not installed: run pip install -e '.[scoring]'")


def test_the_pure_scoring_modules_and_the_platform_import_without_torch():
    code = HIDE_HEAVY + """
import nemotron_assets.definitions
from nemotron_assets.defs.scoring import batching, chat_template, model_files, near_duplicates, rendering, samples
from nemotron_assets.defs.scoring import selection
from nemotron_assets.core import sections
from nemotron_assets.defs.scoring.extra import missing_scoring_packages
assert missing_scoring_packages() == ["torch", "transformers", "sentence-transformers"], missing_scoring_packages()
try:
    import nemotron_assets.defs.scoring.nll
except ModuleNotFoundError as error:
    print("nll needs", error.name)
"""
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "nll needs torch"
