"""The scripts in bench/ import only names our package has.

The benches run nowhere in the suite (bench/README.md: performance is measured there, never in timed tests), so a
name moved or removed by a change went unnoticed: `bench_sft_pack.py` imported `pack_samples` for a week after it
had moved into the tests. Each ``from nemotron_assets... import ...`` of every bench script, at the top or inside a
function, is resolved here without running the script.
"""

import ast
import importlib
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"


def our_imports(script: Path) -> list[tuple[int, str, str]]:
    """(line, module, name) of each name the script imports from our package."""
    tree = ast.parse(script.read_text(encoding="utf-8"), filename=str(script))
    return [(node.lineno, node.module, alias.name) for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "nemotron_assets"
            for alias in node.names]


@pytest.mark.parametrize("script", sorted(BENCH.glob("*.py")), ids=lambda path: path.name)
def test_every_name_a_bench_imports_from_the_package_exists(script):
    missing = []
    for line, module_name, name in our_imports(script):
        module = importlib.import_module(module_name)
        if not hasattr(module, name):
            try:  # a submodule imported by name (from nemotron_assets.formats import megatron)
                importlib.import_module(f"{module_name}.{name}")
            except ModuleNotFoundError:
                missing.append(f"{script.name}:{line}: {module_name} has no {name}")
    assert missing == []


def test_the_check_sees_imports_inside_functions(tmp_path):
    script = tmp_path / "bench_x.py"
    script.write_text("def child():\n    from nemotron_assets.formats.packing import plan_bins, no_such_name\n")
    assert our_imports(script) == [(2, "nemotron_assets.formats.packing", "plan_bins"),
                                   (2, "nemotron_assets.formats.packing", "no_such_name")]
