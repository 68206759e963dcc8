"""The model folder's chat template is the one transformers' AutoTokenizer finds (compared with transformers)."""

import json
import shutil

import pytest

from nemotron_assets.defs.scoring.chat_template import find_chat_templates, is_harmony_tokenizer
from nemotron_assets.sources.errors import InputError
from nemotron_assets.tokenize.loading import locate_tokenizer

A, B, TOOLS = "{{ 'A' }}", "{{ 'B' }}", "{{ 'T' }}"


def tokenizer_folder(path, config_template=None):
    path.mkdir()
    shutil.copy(locate_tokenizer("llama3").tokenizer_json, path / "tokenizer.json")
    config = {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>",
              "tokenizer_class": "PreTrainedTokenizerFast"}
    if config_template is not None:
        config["chat_template"] = config_template
    (path / "tokenizer_config.json").write_text(json.dumps(config))
    return path


def transformers_choice(folder, has_tools: bool) -> str:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(folder).get_chat_template(tools=[{"x": 1}] if has_tools else None)


LAYOUTS = {
    "config string": (A, {}),
    "config list with tool_use": ([{"name": "default", "template": A}, {"name": "tool_use", "template": TOOLS}], {}),
    "file wins over config": (B, {"chat_template.jinja": A}),
    "file plus additional tool_use": (None, {"chat_template.jinja": A,
                                             "additional_chat_templates/tool_use.jinja": TOOLS}),
}


@pytest.mark.parametrize("layout", LAYOUTS)
def test_the_template_is_the_one_transformers_uses(tmp_path, layout):
    config_template, files = LAYOUTS[layout]
    folder = tokenizer_folder(tmp_path / "tok", config_template)
    for name, text in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)
    templates = find_chat_templates(folder)
    for has_tools in (False, True):
        assert templates.select(has_tools).source == transformers_choice(folder, has_tools)


def test_several_templates_without_a_default_are_refused(tmp_path):
    folder = tokenizer_folder(tmp_path / "tok", [{"name": "tool_use", "template": TOOLS}])
    with pytest.raises(InputError, match="none is named 'default'"):
        find_chat_templates(folder).select(has_tools=False)
    assert find_chat_templates(folder).select(has_tools=True).source == TOOLS


def test_a_folder_without_a_template_is_refused(tmp_path):
    with pytest.raises(InputError, match="the model has no chat template"):
        find_chat_templates(tokenizer_folder(tmp_path / "tok"))


def test_a_harmony_tokenizer_is_rendered_with_harmony_even_with_a_jinja_template(tmp_path):
    folder = tokenizer_folder(tmp_path / "tok", A)
    assert not is_harmony_tokenizer(folder)
    tokenizer = json.loads((folder / "tokenizer.json").read_text())
    for i, token in enumerate(["<|start|>", "<|channel|>", "<|message|>", "<|end|>", "<|return|>", "<|call|>"]):
        tokenizer["added_tokens"].append({"id": 128256 + i, "content": token, "single_word": False, "lstrip": False,
                                          "rstrip": False, "normalized": False, "special": True})
    (folder / "tokenizer.json").write_text(json.dumps(tokenizer))
    templates = find_chat_templates(folder)
    assert templates.harmony and is_harmony_tokenizer(folder)
