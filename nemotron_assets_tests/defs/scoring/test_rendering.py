"""The glue to the SFT renderer: a model folder's rows render to exactly what transformers renders for it."""

import json

import numpy as np
import pytest

from nemotron_assets.defs.scoring.model_files import locate_model
from nemotron_assets.defs.scoring.rendering import ModelRenderer, conversation_from_row
from nemotron_assets.sources.errors import InputError
from nemotron_assets_tests.defs.scoring.tiny_llama import CONVERSATIONS, TEMPLATE, copy_folder, transformers_render


@pytest.fixture(scope="module")
def renderer(tiny_llama):
    return ModelRenderer(locate_model(str(tiny_llama)))


def test_whole_conversations_equal_transformers_ids_and_assistant_masks(renderer, reference_tokenizer):
    results = renderer(CONVERSATIONS)
    for (messages, tools), result in zip(CONVERSATIONS, results):
        ids, mask = transformers_render(reference_tokenizer, messages, tools)
        assert result.dropped is None
        np.testing.assert_array_equal(result.ids, ids)
        np.testing.assert_array_equal(result.trained, mask)


def test_a_reasoning_conversation_stays_one_sample_with_every_assistant_turn_trained(renderer, reference_tokenizer):
    messages = [{"role": "user", "content": "First?"},
                {"role": "assistant", "content": "One.", "reasoning_content": "count"},
                {"role": "user", "content": "Second?"},
                {"role": "assistant", "content": "Two.", "reasoning_content": "count again"}]
    [result] = renderer([(messages, None)])
    ids, mask = transformers_render(reference_tokenizer, messages, None)
    np.testing.assert_array_equal(result.ids, ids)
    np.testing.assert_array_equal(result.trained, mask)
    text = reference_tokenizer.decode(result.ids[result.trained.astype(bool)])
    assert "One." in text and "Two." in text


def test_a_special_token_literal_drops_the_row_with_its_reason(renderer):
    messages = [{"role": "user", "content": "Write <|eot_id|> please"}, {"role": "assistant", "content": "No."}]
    [result] = renderer([(messages, None)])
    assert result.dropped == "special_token_literal" and "<|eot_id|>" in result.detail


def test_rows_of_a_pool_decode_their_json_columns():
    messages, tools = CONVERSATIONS[2]
    row = {"id": "a", "messages": json.dumps(messages), "tools": json.dumps(tools)}
    assert conversation_from_row(row, "pool.parquet", 7) == (messages, tools)
    assert conversation_from_row({"messages": json.dumps(messages), "tools": "[]"}, "p", 0)[1] is None
    with pytest.raises(InputError, match=r"pool.parquet row 7 field 'messages': not valid JSON"):
        conversation_from_row({"messages": "[{", "tools": None}, "pool.parquet", 7)


def test_the_tool_use_template_renders_conversations_with_tools(tiny_llama, tmp_path):
    """A folder with a default and a tool_use template: rows with tools get tool_use, as transformers picks it."""
    folder = copy_folder(tiny_llama, tmp_path / "model")
    tool_use = TEMPLATE.replace("Functions you may call:", "TOOLS AVAILABLE:")
    (folder / "additional_chat_templates").mkdir()
    (folder / "additional_chat_templates" / "tool_use.jinja").write_text(tool_use, encoding="utf-8")
    from transformers import AutoTokenizer

    reference = AutoTokenizer.from_pretrained(folder)
    renderer = ModelRenderer(locate_model(str(folder)))
    with_tools, without_tools = CONVERSATIONS[2], CONVERSATIONS[0]
    for messages, tools in (with_tools, without_tools):
        [result] = renderer([(messages, tools)])
        ids, mask = transformers_render(reference, messages, tools)
        np.testing.assert_array_equal(result.ids, ids)
        np.testing.assert_array_equal(result.trained, mask)
    assert "TOOLS AVAILABLE" in reference.decode(renderer([with_tools])[0].ids)


def test_a_harmony_tokenizer_renders_harmony_with_the_reasoning_kept_and_trained(tmp_path):
    """A folder whose tokenizer declares the Harmony tokens (the Llama-3 vocabulary plus them, enough to tokenize
    the text) renders Harmony, keeps the analysis message, and trains each assistant message after its role name
    through its terminator (docs/architecture.md §4.3)."""
    import shutil

    from tokenizers import Tokenizer

    from nemotron_assets.tokenize.loading import locate_tokenizer

    folder = tmp_path / "harmony_model"
    folder.mkdir()
    shutil.copy(locate_tokenizer("llama3").tokenizer_json, folder / "tokenizer.json")
    tokenizer = json.loads((folder / "tokenizer.json").read_text())
    for i, token in enumerate(["<|start|>", "<|channel|>", "<|message|>", "<|end|>", "<|return|>", "<|call|>",
                               "<|constrain|>"]):
        tokenizer["added_tokens"].append({"id": 128256 + i, "content": token, "single_word": False, "lstrip": False,
                                          "rstrip": False, "normalized": False, "special": True})
    (folder / "tokenizer.json").write_text(json.dumps(tokenizer))
    (folder / "tokenizer_config.json").write_text(json.dumps({"eos_token": "<|return|>"}))
    messages, _ = CONVERSATIONS[3]
    [result] = ModelRenderer(locate_model(str(folder)))([(messages, None)])
    decode = Tokenizer.from_file(str(folder / "tokenizer.json")).decode
    text = decode(result.ids.tolist(), skip_special_tokens=False)
    assert text.startswith("<|start|>system<|message|>")
    trained = decode(result.ids[result.trained.astype(bool)].tolist(), skip_special_tokens=False)
    assert trained == (f"<|channel|>analysis<|message|>{messages[1]['reasoning_content']}<|end|>"
                       f"<|channel|>final<|message|>{messages[1]['content']}<|return|>")
