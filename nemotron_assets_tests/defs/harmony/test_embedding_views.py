"""Embedding views: the behavior signature describes what was done, never the values."""

from nemotron_assets.defs.harmony.views import answer_type, embed_text
from nemotron_assets.formats.harmony import Message, render_harmony


def _conversation(city: str, answer: str) -> str:
    messages = [
        Message(role="user", content=f"Weather in {city}?"),
        Message(role="assistant", channel="analysis", content="Call the tool."),
        Message(role="assistant", channel="commentary", recipient="functions.get_weather",
                content_type="<|constrain|>json", content=f'{{"city": "{city}"}}'),
        Message(role="tool", name="functions.get_weather", recipient="assistant", channel="commentary",
                content='{"temp_c": 20}'),
        Message(role="assistant", channel="final", content=answer),
    ]
    return render_harmony(messages)


def test_behavior_is_the_same_for_different_values_and_names_the_tool_and_keys():
    paris, tokyo = _conversation("Paris", "It is 20 °C."), _conversation("Tokyo", "About 20 degrees.")
    assert embed_text("behavior", paris) == embed_text("behavior", tokyo)
    signature = embed_text("behavior", paris)
    assert "tools: get_weather" in signature and "argument keys: city" in signature and "Paris" not in signature
    assert "results returned: all" in signature and "answer: text" in signature


def test_prompt_and_reasoning_views_pick_the_right_messages():
    text = _conversation("Paris", "42")
    assert embed_text("prompt", text) == "Weather in Paris?"
    assert embed_text("reasoning_excerpt", text) == "Call the tool."
    assert embed_text("behavior", text).endswith("answer: number")


def test_answer_types():
    assert [answer_type(a) for a in ["", " 3.5 ", "so \\\\boxed{4}", "```py\\nx\\n```", '{"a": 1}', "hi"]] == [
        "empty", "number", "boxed", "code", "json", "text"]


def test_prelude_messages_are_not_part_of_any_view():
    assert "ChatGPT" not in embed_text("prompt", _conversation("Paris", "ok"))
