"""Shared parts of the scoring tests (their fixtures are in conftest.py): a tiny, randomly initialized Llama model
with the real Llama-3 tokenizer, the references the tests compare against, and conversations to feed them.

References, all independent of `nemotron_assets.defs.scoring`:

- ids and assistant masks from transformers' ``apply_chat_template(..., return_assistant_tokens_mask=True)`` with
  the model folder's own tokenizer and template (`transformers_render`);
- NLL from one plain forward pass of the whole model over one row and PyTorch's ``cross_entropy`` over the full
  logits (`direct_token_nll`): the textbook computation, no batching, no padding, no output-layer split.

The model has 2 layers, hidden size 16, and the full 128,256-entry vocabulary (an 8 MB tied embedding). Its weights
are drawn with a large spread (``initializer_range=0.5``) so its predictions are far from uniform: an off-by-one
in which position predicts which token would change the scores a lot.
"""

import shutil
from pathlib import Path

import numpy as np

FIXTURES = Path(__file__).parent / "fixtures"
TEMPLATE = (FIXTURES / "llama3_scoring.jinja").read_text(encoding="utf-8")
LLAMA3_VOCAB = 128_256
BOS, EOT = "<|begin_of_text|>", "<|eot_id|>"

WEATHER_TOOL = {"type": "function", "function": {"name": "get_weather", "description": "Current weather",
                                                  "parameters": {"type": "object",
                                                                 "properties": {"city": {"type": "string"}}}}}
CONVERSATIONS = [
    ([{"role": "user", "content": "What is 2 + 2?"}, {"role": "assistant", "content": "4"}], None),
    ([{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Name a prime."},
      {"role": "assistant", "content": "Seven."}, {"role": "user", "content": "Another one, larger than 10?"},
      {"role": "assistant", "content": "Thirteen is prime, and so is 17."}], None),
    ([{"role": "user", "content": "Weather in Zürich? ☀️"},
      {"role": "assistant", "content": "", "tool_calls": [
          {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Zürich"}}}]},
      {"role": "tool", "content": "21 °C, sunny", "tool_call_id": "c1", "name": "get_weather"},
      {"role": "assistant", "content": "It is 21 °C and sunny in Zürich."}], [WEATHER_TOOL]),
    ([{"role": "user", "content": "Prove that 1 + 1 = 2 in one line."},
      {"role": "assistant", "content": "By the successor axioms, S(0) + S(0) = S(S(0)).",
       "reasoning_content": "Peano arithmetic: 1 = S(0), 2 = S(S(0)); a + S(b) = S(a + b)."}], None),
    ([{"role": "user", "content": "Say nothing."}, {"role": "assistant", "content": ""}], None),
    ([{"role": "user", "content": " ".join(["long"] * 120) + "?"},
      {"role": "assistant", "content": "Ok. " * 90}], None),
]


def build_tiny_llama(folder: Path, seed: int = 0, template: str = TEMPLATE) -> Path:
    """Save a tiny random Llama (tied embeddings) and the Llama-3 tokenizer with `template` into `folder`."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    from nemotron_assets.tokenize.loading import locate_tokenizer

    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=LLAMA3_VOCAB, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=2048,
                         tie_word_embeddings=True, initializer_range=0.5, bos_token_id=128000, eos_token_id=128009)
    LlamaForCausalLM(config).save_pretrained(folder)
    tokenizer = PreTrainedTokenizerFast(tokenizer_file=str(locate_tokenizer("llama3").tokenizer_json),
                                        bos_token=BOS, eos_token=EOT)
    tokenizer.chat_template = template
    tokenizer.save_pretrained(folder)
    return folder


def transformers_render(tokenizer, messages, tools) -> tuple[np.ndarray, np.ndarray]:
    """(ids, assistant mask) as transformers renders the conversation with the folder's template."""
    out = tokenizer.apply_chat_template(messages, tools=tools, tokenize=True, return_dict=True,
                                        return_assistant_tokens_mask=True)
    return np.asarray(out["input_ids"], dtype=np.int64), np.asarray(out["assistant_masks"], dtype=np.uint8)


def direct_token_nll(model, ids: np.ndarray) -> np.ndarray:
    """-log p(ids[t] | ids[:t]) for t = 1..n-1, from one unbatched forward pass and cross_entropy over full logits."""
    import torch

    with torch.no_grad():
        logits = model(input_ids=torch.as_tensor(ids, dtype=torch.long)[None]).logits[0]
        return torch.nn.functional.cross_entropy(logits[:-1].double(), torch.as_tensor(ids[1:], dtype=torch.long),
                                                 reduction="none").numpy()


def direct_nll_sum(model, ids: np.ndarray, trained: np.ndarray) -> float:
    """The masked cross-entropy sum: trained tokens from position 1 on."""
    return float((direct_token_nll(model, ids) * np.asarray(trained[1:], dtype=np.float64)).sum())


def copy_folder(source: Path, target: Path) -> Path:
    shutil.copytree(source, target)
    return target
