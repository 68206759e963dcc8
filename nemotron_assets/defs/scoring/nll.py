"""Completion-only negative log-likelihood of rendered rows under a causal language model.

For a row with token ids ``x`` and trained mask ``m`` (`samples.ScoringSample`)::

    nll_sum       = sum over t >= 1 with m[t] = 1 of  -log p(x[t] | x[0..t-1])
    tokens_scored = number of such t
    nll_mean      = nll_sum / tokens_scored            (undefined -- NaN, written as null -- when no token is scored)

How a window of rows is computed (`NllScorer.score`), and why each step is safe:

1. Rows are grouped into padded batches by length (`batching.plan_batches`: < 10 % padding, a token budget).
2. Rows are padded on the *right* and the model runs without an attention mask. A causal model's output at
   position ``p`` depends only on positions ``<= p``, and every pad sits after all of its row's real tokens, so
   the pads change nothing that is scored. Without a mask, transformers lets SDPA use its causal kernel, which
   never builds a ``width x width`` matrix (a padding mask would force it to).
3. Only the decoder body runs on every position. The output layer (hidden size x vocabulary, most of the compute
   of a small model with a 128k vocabulary) runs only on the positions that predict a trained token. Their NLL is
   ``logsumexp(logits) - logits[target]``: the target's logit is one dot product per position, and the logsumexp
   is taken tile by tile (`OutputTiles`): a tile of positions x vocabulary entries is one matrix product into a
   preallocated buffer, reduced in place (max, ``exp``, sum) to one value per position and vocabulary block, and
   the blocks are combined by a last, small logsumexp. On CPU a tile is 4 MB, so it is reduced while it is still
   in the core's cache; that, and writing no fresh ``positions x 128k`` logits (and no log-softmax of them),
   makes the output layer run at the speed of its matrix product (bench/bench_nll.py). On CUDA a tile spans the
   whole vocabulary (`LOGITS_BYTES`), which suits a GPU's few large kernels better.
4. Per-token values are summed per row in float64 (`numpy.bincount`), in position order: deterministic.

Step 3 relies on the model's logits being exactly ``lm_head(decoder(x))``. That is checked when the model loads
(`split_output_layer`); a model that post-processes its logits (soft-capping, scaling) is refused with a clear
error rather than scored wrongly.

Everything runs under ``torch.inference_mode()``, in the precision of `device.choose_device` (fp32 on CPU, bf16 on
CUDA, or what ``scoring.dtype`` forces; the cross-entropy is always taken in fp32). In fp32 on CPU the output layer's
matrix products run near the cores' fp32 peak and are most of the time (bench/README.md), which bounds the speed-up
over a naive loop; bf16 on a CPU with AMX runs them several times faster.
"""

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from nemotron_assets.defs.scoring.batching import MAX_PADDING, plan_batches
from nemotron_assets.defs.scoring.device import DeviceChoice
from nemotron_assets.defs.scoring.model_files import ModelFiles
from nemotron_assets.defs.scoring.samples import ScoringSample
from nemotron_assets.sources.errors import InputError

#: Memory for one tile of output-layer logits on CUDA (the whole vocabulary for as many positions as fit).
LOGITS_BYTES = 256 << 20
#: Positions x vocabulary entries of one tile on CPU: 4 MB of fp32 logits, a core's L2 cache (measured in
#: bench/bench_nll.py against longer and wider tiles).
CPU_TILE = (1024, 1024)
_PROBE_LENGTH = 8


@dataclass(frozen=True)
class NllScores:
    """Per-row results of one window, in the window's row order, and what batching cost."""

    nll_sum: np.ndarray  # float64
    tokens_scored: np.ndarray  # int64
    batches: int = 0  # forward passes
    token_slots: int = 0  # tokens computed, padding included
    tokens: int = 0  # real tokens among them

    @property
    def nll_mean(self) -> np.ndarray:
        """nll_sum / tokens_scored, NaN where no token was scored."""
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(self.tokens_scored > 0, self.nll_sum / np.maximum(self.tokens_scored, 1), np.nan)


def split_output_layer(model: torch.nn.Module) -> tuple[torch.nn.Module, torch.nn.Module]:
    """The model's decoder body and output layer, after checking on a probe input that
    ``output_layer(body(x).last_hidden_state)`` equals ``model(x).logits``; `InputError` if it does not."""
    body, head = model.get_decoder(), model.get_output_embeddings()
    name = type(model).__name__
    if body is None or body is model or head is None:
        raise InputError(f"{name} has no separate decoder body and output layer: it cannot be scored",
                         field="scoring.model")
    vocab = head.weight.shape[0]
    probe = (torch.arange(1, _PROBE_LENGTH + 1) % vocab)[None].to(head.weight.device)
    with torch.inference_mode():
        expected = model(input_ids=probe, use_cache=False).logits.float()
        split = head(body(input_ids=probe, use_cache=False).last_hidden_state).float()
    if expected.shape != split.shape or not torch.allclose(expected, split, rtol=1e-3, atol=1e-3):
        raise InputError(f"{name}'s logits are not its output layer applied to its last hidden state (the model "
                         "post-processes them, e.g. soft-capping or scaling), which completion-only scoring relies "
                         "on", field="scoring.model")
    return body, head


class NllScorer:
    """Scores windows of rendered rows with one causal LM (see the module docstring)."""

    def __init__(self, model: torch.nn.Module, device: DeviceChoice, batch_tokens: int,
                 max_padding: float = MAX_PADDING, logits_bytes: int = LOGITS_BYTES) -> None:
        self.model = model.eval()
        self.device = device
        self.batch_tokens = batch_tokens
        self.max_padding = max_padding
        self.body, self.head = split_output_layer(self.model)
        self.vocab_size = int(self.head.weight.shape[0])
        self.input_vocab_size = int(self.model.get_input_embeddings().weight.shape[0])
        if device.device == "cpu":
            positions, vocabulary = CPU_TILE
        else:
            positions, vocabulary = max(1, logits_bytes // (self.vocab_size * 4 * 2)), self.vocab_size
        self.tiles = OutputTiles(self.head, positions, vocabulary)

    @classmethod
    def load(cls, files: ModelFiles, device: DeviceChoice, batch_tokens: int, **options) -> "NllScorer":
        """Load a causal LM from a local folder (never from the network) onto the chosen device and precision."""
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(files.folder, dtype=device.torch_dtype(), local_files_only=True)
        return cls(model.to(device.device), device, batch_tokens, **options)

    def score(self, samples: Sequence[ScoringSample]) -> NllScores:
        """nll_sum and tokens_scored of each sample, in order."""
        lengths = np.array([len(s) for s in samples], dtype=np.int64)
        tokens_scored = np.array([s.tokens_scored for s in samples], dtype=np.int64)
        nll_sum = np.zeros(len(samples), dtype=np.float64)
        self._check_ids(samples)
        batches = plan_batches(lengths, self.batch_tokens, self.max_padding)
        with torch.inference_mode():
            for batch in batches:
                nll_sum[batch.rows] = self._score_batch([samples[i] for i in batch.rows], batch.width)
        return NllScores(nll_sum, tokens_scored, len(batches), sum(b.slots for b in batches), int(lengths.sum()))

    def _check_ids(self, samples: Sequence[ScoringSample]) -> None:
        top = max((int(s.ids.max()) for s in samples), default=0)
        if top >= self.input_vocab_size:
            raise ValueError(f"token id {top} is outside the model's vocabulary ({self.input_vocab_size} "
                             "embeddings): the rows were rendered with another tokenizer")

    def _score_batch(self, samples: list[ScoringSample], width: int) -> np.ndarray:
        """Summed NLL of each row of one right-padded batch."""
        ids = np.zeros((len(samples), width), dtype=np.int64)  # pad id 0: any valid id, never scored or attended to
        predicts_trained = np.zeros((len(samples), width), dtype=bool)  # [b, p]: position p predicts a trained token
        for b, sample in enumerate(samples):
            ids[b, : len(sample)] = sample.ids
            predicts_trained[b, : len(sample) - 1] = sample.trained[1:]
        rows, positions = np.nonzero(predicts_trained)
        if len(rows) == 0:
            return np.zeros(len(samples))
        device = self.device.device
        input_ids = torch.from_numpy(ids).to(device)
        hidden = self.body(input_ids=input_ids, use_cache=False).last_hidden_state
        rows_t, positions_t = torch.from_numpy(rows).to(device), torch.from_numpy(positions).to(device)
        picked = hidden[rows_t, positions_t]
        targets = input_ids[rows_t, positions_t + 1]
        token_nll = self.tiles.token_nll(picked, targets)
        return np.bincount(rows, weights=token_nll.numpy(), minlength=len(samples))


class OutputTiles:
    """``-log softmax(head(x))[target]`` for many positions, tile by tile (step 3 of the module docstring).

    The head must be a linear layer (every Hugging Face causal LM's ``lm_head`` is): its weight rows are the
    vocabulary entries, so a tile's logits are ``x @ weight[block].T (+ bias[block])``."""

    def __init__(self, head: torch.nn.Module, positions: int, vocabulary: int) -> None:
        if not isinstance(head, torch.nn.Linear):
            raise InputError(f"the output layer is a {type(head).__name__}, not a linear layer: it cannot be scored",
                             field="scoring.model")
        self.weight, self.bias = head.weight, head.bias
        self.positions = positions
        size = int(self.weight.shape[0])
        self.blocks = [(start, min(start + vocabulary, size)) for start in range(0, size, vocabulary)]
        self.buffer = torch.empty(positions * min(vocabulary, size), dtype=self.weight.dtype,
                                  device=self.weight.device)

    def token_nll(self, states: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """float64 NLL (on the CPU) of ``targets[i]`` after ``states[i]``, for every row of `states`."""
        out = torch.empty(len(targets), dtype=torch.float64)
        for start in range(0, len(targets), self.positions):
            x, target = states[start:start + self.positions], targets[start:start + self.positions]
            target_logit = (x.float() * self.weight[target].float()).sum(1)
            if self.bias is not None:
                target_logit += self.bias[target].float()
            out[start:start + len(x)] = (self._logsumexp(x) - target_logit).double().cpu()
        return out

    def _logsumexp(self, x: torch.Tensor) -> torch.Tensor:
        """fp32 logsumexp of ``head(x)`` over the vocabulary: per block into the buffer, reduced in place."""
        per_block = torch.empty(len(x), len(self.blocks), dtype=torch.float32, device=x.device)
        for j, (start, stop) in enumerate(self.blocks):
            logits = self.buffer[: len(x) * (stop - start)].view(len(x), stop - start)  # contiguous
            torch.mm(x, self.weight[start:stop].T, out=logits)
            if self.bias is not None:
                logits += self.bias[start:stop]
            tile = logits.float()  # the buffer itself in fp32; a copy of a bf16 tile
            peak = tile.amax(1)
            tile.sub_(peak[:, None]).exp_()
            per_block[:, j] = peak + tile.sum(1).log()
        return torch.logsumexp(per_block, 1)
