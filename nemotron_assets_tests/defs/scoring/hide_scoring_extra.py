"""Code to run first in a fresh interpreter (``python -c HIDE_HEAVY + ...``): it makes ``import torch`` /
``import transformers`` / ``import sentence_transformers`` fail and find_spec report them missing, as if the
scoring extra were not installed."""

HIDE_HEAVY = """
import importlib.abc, sys
class Hide(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("torch", "transformers", "sentence_transformers"):
            raise ModuleNotFoundError(f"No module named {name!r}")
sys.meta_path.insert(0, Hide())
for name in ("torch", "transformers", "sentence_transformers"):
    sys.modules[name] = None
"""
