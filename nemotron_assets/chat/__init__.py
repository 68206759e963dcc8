"""Chat SFT: rendering, tokenization and masks (pure code, no Dagster). Packing, the packed files and holdout splits
are in formats/ (``packing.py``, ``packed_sft.py``, ``splits.py``).

Rendering, tokenization and masks
---------------------------------

Input is the canonical conversation: ``messages``, a list of OpenAI-style dicts — ``role`` (system, developer,
user, assistant, tool) and ``content`` (str); assistant messages may have ``reasoning_content`` and ``tool_calls``
(``[{"id", "type": "function", "function": {"name", "arguments": {...}}}]``), tool messages ``tool_call_id`` and
``name``; optional keys may be absent or None — and ``tools``, the original JSON schemas (or None).

The usual call, on a batch (one tokenizer call for all of it)::

    from nemotron_assets.chat.chat_format import ChatFormatSpec, load_chat_format
    from nemotron_assets.chat.samples import samples_for_conversations

    chat_format = load_chat_format(ChatFormatSpec("path/to/template.jinja", tokenizer_model="llama3"))
    for result in samples_for_conversations([(messages, tools), ...], chat_format.template, chat_format.tokenizer):
        result.samples    # [Sample(ids: int32[n], assistant_mask: uint8[n], user_turn, messages)]
        result.dropped    # Counter: special_token_literal, ends_on_user_turn, template_error, no_trained_tokens,
                          #          invalid_unicode
        result.why        # one line per drop, for dropped_examples

On every core: the ``sft_samples`` step sends batches to processes (defs/sft/render_pool.py). Over-long
samples: ``chat_format.truncate(ids, mask, max_tokens)`` keeps the head and ends on the template's end-of-turn
(``chat_format.end_of_turn_ids()``), the ``truncate`` function the packer takes.

Step by step, for one sample:

- ``samples.render_sample(messages, tools, template, trained_from=0) -> RenderedSample(text, trained_spans)``;
- ``samples.tokenize_sample(rendered, tokenizer) -> (ids, assistant_mask)`` (``tokenize_samples`` for a list).

Modules:

- ``templates.py`` — Jinja templates in transformers' environment; trained spans from ``{% generation %}`` tags or,
  without tags, by prefix rendering; the built-in ``chatml``.
- ``harmony.py`` — the ``harmony`` template: openai-harmony's training render, keeping the trained turn's
  reasoning and dropping the history's.
- ``tokenizers.py`` / ``o200k.py`` — one tokenization per text and a char -> token map per text, exact to Hugging
  Face ``tokenizers`` / tiktoken, with a proven fastokens fast path; ``o200k_harmony`` built offline.
- ``masks.py`` — spans -> token mask (transformers' rule) and truncation.
- ``masked_roles.py`` — where system/developer/user/tool text is, for the no-trained-token check.
- ``samples.py`` — a conversation -> samples: split per user turn for reasoning, drop reasons.
- ``tokenizer_choice.py`` — the ``sft.tokenizer_model`` setting -> the tokenizer of its kind.
- ``chat_format.py`` — the ``sft:`` settings (``chat_template``, ``tokenizer_model``) -> template + tokenizer.
"""
