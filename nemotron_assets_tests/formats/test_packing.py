"""Packing (nemotron_assets/formats/packing.py): property tests of the three algorithms against naive reference
packers written here, hand-worked bins (mask shift, padding, capacity), over-long handling, windows and checks."""

import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nemotron_assets.formats.packing import (
    OVERLONG,
    OVERLONG_NOTHING_TRAINED,
    TOO_SHORT,
    PackSample,
    PackSettings,
    PackStats,
    bin_problems,
    compare_samples,
    masked_role_problems,
    plan_bins,
    planned_digest,
    sample_digest,
    shuffle_order,
    unpack_bin,
    unshift_mask,
)
from nemotron_assets_tests.formats.packing_stream import pack_samples

MASK64 = (1 << 64) - 1


# --- independent references ------------------------------------------------------------------------------------------


def splitmix64(x: int) -> int:
    """SplitMix64's output function with Python integers (Steele, Lea, Flood; Vigna's splitmix64.c)."""
    z = (x + 0x9E3779B97F4A7C15) & MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


def reference_shuffle(n: int, seed: int, window: int) -> list[int]:
    stream = splitmix64(splitmix64(seed & MASK64) ^ window)
    keys = [splitmix64((stream + i) & MASK64) for i in range(n)]
    return sorted(range(n), key=lambda i: (keys[i], i))


def naive_first_fit(lengths: list[int], order: list[int], capacity: int) -> list[list[int]]:
    """First fit by scanning every open bin: the textbook definition, O(n * bins)."""
    bins, free = [], []
    for item in order:
        for b, room in enumerate(free):
            if room >= lengths[item]:
                bins[b].append(item)
                free[b] -= lengths[item]
                break
        else:
            bins.append([item])
            free.append(capacity - lengths[item])
    return bins


def sample(i: int, ids: list[int], mask: list[int], dataset: str = "d", copy: int = 0) -> PackSample:
    return PackSample(f"s{i}", dataset, i, np.array(ids, dtype=np.int32), np.array(mask, dtype=np.uint8), copy)


def random_samples(lengths: list[int], seed: int = 0) -> list[PackSample]:
    rng = np.random.default_rng(seed)
    return [sample(i, rng.integers(0, 50_000, n).tolist(), (rng.random(n) < 0.6).astype(int).tolist())
            for i, n in enumerate(lengths)]


def pack(samples, truncate=None, **kw):
    stats = PackStats(pack_size=kw.get("pack_size", 4096))
    return list(pack_samples(samples, PackSettings(**kw), stats, truncate=truncate)), stats


# --- the algorithms --------------------------------------------------------------------------------------------------

LENGTHS = st.lists(st.integers(1, 64), max_size=200)


def test_splitmix64_matches_its_published_first_outputs():
    # A SplitMix64 generator seeded with 0 outputs 0xe220a8397b1dcdaf, then 0x6e789e6aa1b965f4.
    assert splitmix64(0) == 0xE220A8397B1DCDAF
    assert splitmix64(0x9E3779B97F4A7C15) == 0x6E789E6AA1B965F4


@given(n=st.integers(0, 300), seed=st.integers(-(2**70), 2**70), window=st.integers(0, 10**6))
def test_shuffle_order_is_the_documented_splitmix64_order(n, seed, window):
    assert shuffle_order(n, seed, window).tolist() == reference_shuffle(n, seed, window)


@pytest.mark.parametrize("packing", ["first_fit_decreasing", "first_fit_shuffle", "concatenative"])
@given(lengths=LENGTHS, pack_size=st.integers(64, 200), seed=st.integers(0, 2**32))
def test_every_item_lands_in_exactly_one_bin_within_capacity(packing, lengths, pack_size, seed):
    plan = plan_bins(lengths, PackSettings(pack_size=pack_size, packing=packing, seed=seed))
    assert sorted(i for b in plan for i in b) == list(range(len(lengths)))
    assert all(b and sum(lengths[i] for i in b) <= pack_size for b in plan)
    assert plan == plan_bins(lengths, PackSettings(pack_size=pack_size, packing=packing, seed=seed))


@given(lengths=LENGTHS, pack_size=st.integers(64, 200))
def test_first_fit_decreasing_is_ffd(lengths, pack_size):
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    plan = plan_bins(lengths, PackSettings(pack_size=pack_size, packing="first_fit_decreasing"))
    assert plan == naive_first_fit(lengths, order, pack_size)


@given(lengths=LENGTHS, pack_size=st.integers(64, 200), seed=st.integers(0, 2**32), window=st.integers(0, 50))
def test_first_fit_shuffle_is_first_fit_in_the_seeded_order(lengths, pack_size, seed, window):
    plan = plan_bins(lengths, PackSettings(pack_size=pack_size, packing="first_fit_shuffle", seed=seed), window)
    assert plan == naive_first_fit(lengths, reference_shuffle(len(lengths), seed, window), pack_size)


def test_first_fit_shuffle_depends_on_the_seed_and_the_window():
    lengths = list(range(1, 41))
    plans = {str(plan_bins(lengths, PackSettings(pack_size=64, seed=seed), window))
             for seed in (0, 1) for window in (0, 1)}
    assert len(plans) == 4


@given(lengths=LENGTHS, pack_size=st.integers(64, 200))
def test_concatenative_keeps_order_and_opens_a_bin_only_when_the_next_item_does_not_fit(lengths, pack_size):
    plan = plan_bins(lengths, PackSettings(pack_size=pack_size, packing="concatenative"))
    assert [i for b in plan for i in b] == list(range(len(lengths)))
    for current, following in zip(plan, plan[1:]):
        assert sum(lengths[i] for i in current) + lengths[following[0]] > pack_size


def test_first_fit_decreasing_packs_tighter_than_concatenative_on_a_known_case():
    lengths = [10, 10, 60, 60, 60, 60]  # ffd: [60, 10] [60, 10] [60] [60]; next fit: [10, 10] [60] [60] [60] [60]
    assert len(plan_bins(lengths, PackSettings(pack_size=70, packing="first_fit_decreasing"))) == 4
    assert len(plan_bins(lengths, PackSettings(pack_size=70, packing="concatenative"))) == 5


def test_lengths_outside_one_to_pack_size_are_refused():
    with pytest.raises(ValueError, match=r"\[1, 10\]"):
        plan_bins([3, 11], PackSettings(pack_size=10))
    with pytest.raises(ValueError, match=r"\[1, 10\]"):
        plan_bins([0, 3], PackSettings(pack_size=10))



@pytest.mark.parametrize("sizes, message", [
    ({"pack_size": 1}, "sft.pack_size must be an integer >= 2, got 1"),
    ({"pack_window": 0}, "sft.pack_window must be an integer >= 1, got 0"),
    ({"pad_to_multiple": 0}, "sft.pad_to_multiple must be an integer >= 1, got 0"),
    ({"pack_size": 8, "pad_to_multiple": 16}, "sft.pad_to_multiple (16) exceeds sft.pack_size (8)"),
])
def test_the_blend_section_and_pack_settings_apply_one_size_rule(sizes, message):
    from pydantic import ValidationError

    from nemotron_assets.core.sections import SftSettings

    with pytest.raises(ValueError, match=re.escape(message)):
        PackSettings(**sizes, pad_id=0)
    with pytest.raises(ValidationError, match=re.escape(message)):
        SftSettings(chat_template="chatml", **sizes)

# --- bins, worked by hand --------------------------------------------------------------------------------------------


def test_a_bin_by_hand_the_mask_shifts_inside_each_sample():
    a = sample(0, [10, 11, 12], [0, 1, 1])
    b = sample(1, [20, 21], [0, 1])
    (only,), stats = pack([a, b], pack_size=8, packing="concatenative")
    assert only.input_ids.tolist() == [10, 11, 12, 20, 21]
    assert only.loss_mask.tolist() == [1, 1, 0, 1, 0]  # a[j] gates predicting a[j+1]; each last position is 0
    assert only.seq_start_id.tolist() == [0, 3]
    assert only.input_ids.dtype == np.int32 and only.loss_mask.dtype == np.uint8
    assert only.seq_start_id.dtype == np.int32
    assert [(m.id, m.offset, m.length) for m in only.members] == [("s0", 0, 3), ("s1", 3, 2)]
    assert (stats.samples, stats.bins, stats.tokens, stats.positions, stats.trained_tokens) == (2, 1, 5, 3, 3)
    assert stats.packing_efficiency == 3 / 8


def test_a_trained_token_at_the_start_of_the_next_sample_does_not_leak_into_the_previous_one():
    a = sample(0, [1, 2], [0, 0])
    b = sample(1, [3, 4], [1, 1])  # b's first token is "trained", but nothing in the bin predicts it
    (only,), _ = pack([a, b], pack_size=8, packing="concatenative")
    assert only.loss_mask.tolist() == [0, 0, 1, 0]


def test_capacity_counts_len_minus_one():
    # pack_size 5: samples of 3 and 4 tokens take 2 + 3 = 5 positions, so they share a bin (7 tokens stored)
    bins, _ = pack([sample(0, [1, 2, 3], [0, 1, 1]), sample(1, [4, 5, 6, 7], [0, 1, 1, 1])], pack_size=5,
                   packing="concatenative")
    assert [len(b.input_ids) for b in bins] == [7]
    bins, _ = pack([sample(0, [1, 2, 3], [0, 1, 1]), sample(1, [4, 5, 6, 7, 8], [0, 1, 1, 1, 1])], pack_size=5,
                   packing="concatenative")
    assert [len(b.input_ids) for b in bins] == [3, 5]


def test_a_sample_of_exactly_pack_size_plus_one_tokens_fits_and_one_more_is_overlong():
    bins, stats = pack([sample(0, list(range(9)), [0] + [1] * 8), sample(1, list(range(10)), [0] + [1] * 9)],
                       pack_size=8)
    assert [len(b.input_ids) for b in bins] == [9]
    assert stats.dropped == {OVERLONG: 1} and stats.samples_in == 2 and stats.samples == 1


def test_pad_to_multiple_pads_with_the_pad_id_and_an_untrained_mask():
    # 6 tokens take 5 positions; with m = 4 they are padded to 8 positions = 9 tokens (Bridge's pad_seq_to_mult)
    (only,), stats = pack([sample(0, [5, 6, 7, 8, 9, 10], [0, 0, 1, 1, 1, 1])], pack_size=16, pad_to_multiple=4,
                          pad_id=2)
    assert only.input_ids.tolist() == [5, 6, 7, 8, 9, 10, 2, 2, 2]
    assert only.loss_mask.tolist() == [0, 1, 1, 1, 1, 0, 0, 0, 0]
    assert stats.pad_tokens == 3 and stats.max_sample_positions == 8


def test_pad_to_multiple_lowers_the_longest_allowed_sample_to_a_multiple():
    # pack_size 10, m 4: at most 8 positions (Bridge's max_runtime_pad_cap), so 10 tokens (9 positions) are over-long
    settings = PackSettings(pack_size=10, pad_to_multiple=4, pad_id=0)
    assert settings.max_positions == 8
    bins, stats = pack([sample(0, list(range(9)), [1] * 9), sample(1, list(range(10)), [1] * 10)], pack_size=10,
                       pad_to_multiple=4, pad_id=0)
    assert [len(b.input_ids) for b in bins] == [9] and stats.dropped == {OVERLONG: 1}


def test_samples_with_nothing_to_predict_are_dropped_and_counted():
    bins, stats = pack([sample(0, [7], [1]), sample(1, [], []), sample(2, [1, 2], [0, 1])], pack_size=8)
    assert stats.dropped == {TOO_SHORT: 2}
    assert [m.id for b in bins for m in b.members] == ["s2"]


# --- over-long samples -----------------------------------------------------------------------------------------------

END_OF_TURN = [99, 98]


def keep_head_then_end_of_turn(ids, mask, max_tokens):
    """A test truncator: the head, then the template's end-of-turn tokens, trained like the token they follow."""
    head = max_tokens - len(END_OF_TURN)
    last = int(mask[head - 1])
    return (np.concatenate([ids[:head], np.array(END_OF_TURN, dtype=np.int32)]),
            np.concatenate([mask[:head], np.full(len(END_OF_TURN), last, dtype=np.uint8)]))


def test_truncate_keeps_the_head_ends_on_end_of_turn_and_counts_it():
    long = sample(0, list(range(1, 21)), [0, 0] + [1] * 18)
    (only,), stats = pack([long], pack_size=8, overlong="truncate", truncate=keep_head_then_end_of_turn)
    assert only.input_ids.tolist() == [1, 2, 3, 4, 5, 6, 7, 99, 98]  # 9 tokens = pack_size + 1
    assert only.loss_mask.tolist() == [0, 1, 1, 1, 1, 1, 1, 1, 0]
    assert only.members[0].truncated and stats.truncated == 1 and not stats.dropped


def test_a_truncated_sample_that_trains_nothing_is_dropped_and_counted():
    long_prompt = sample(0, list(range(1, 21)), [0] * 15 + [1] * 5)
    bins, stats = pack([long_prompt], pack_size=8, overlong="truncate", truncate=keep_head_then_end_of_turn)
    assert bins == [] and stats.dropped == {OVERLONG_NOTHING_TRAINED: 1} and stats.truncated == 0


def test_a_truncator_that_returns_too_many_tokens_is_an_error():
    with pytest.raises(ValueError, match="more than the 9 allowed"):
        pack([sample(0, list(range(20)), [1] * 20)], pack_size=8, overlong="truncate",
             truncate=lambda ids, mask, n: (ids[:n + 1], mask[:n + 1]))


def test_truncate_without_a_truncator_is_an_error():
    with pytest.raises(ValueError, match="no truncate function"):
        pack([sample(0, list(range(20)), [1] * 20)], pack_size=8, overlong="truncate")


# --- streaming windows -----------------------------------------------------------------------------------------------


def test_window_k_of_a_stream_packs_like_window_k_alone():
    samples = random_samples([int(n) for n in np.random.default_rng(1).integers(2, 40, 95)])
    whole, _ = pack(samples, pack_size=64, pack_window=30, seed=5)
    settings = PackSettings(pack_size=64, pack_window=30, seed=5)
    pieces = [b for k in range(4) for b in pack_samples(samples[30 * k:30 * (k + 1)], settings, first_window=k)]
    assert [b.input_ids.tolist() for b in whole] == [b.input_ids.tolist() for b in pieces]
    # and a bin never mixes samples of two windows
    assert all(len({int(m.source_row) // 30 for m in b.members}) == 1 for b in whole)


def test_a_window_counts_offered_samples_including_dropped_ones():
    samples = [sample(0, [1], [0])] + random_samples([5] * 5)[1:]
    bins, stats = pack(samples, pack_size=64, pack_window=2, packing="concatenative")
    windows = [[m.source_row for m in b.members] for b in bins]
    assert windows == [[1], [2, 3], [4]] and stats.dropped == {TOO_SHORT: 1}


def test_packing_pulls_only_one_window_before_the_first_bin():
    pulled = 0

    def stream():
        nonlocal pulled
        for s in random_samples([10] * 1000):
            pulled += 1
            yield s

    bins = pack_samples(stream(), PackSettings(pack_size=64, pack_window=50))
    next(bins)
    assert pulled == 50


@settings(max_examples=30)
@given(lengths=st.lists(st.integers(0, 80), max_size=60), pack_size=st.integers(32, 100),
       packing=st.sampled_from(["first_fit_decreasing", "first_fit_shuffle", "concatenative"]),
       window=st.integers(1, 70), multiple=st.integers(1, 8))
def test_packed_bins_unpack_to_the_samples_with_shifted_masks(lengths, pack_size, packing, window, multiple):
    samples = random_samples(lengths)
    bins, stats = pack(samples, pack_size=pack_size, packing=packing, pack_window=window,
                       pad_to_multiple=multiple, pad_id=1)
    limit = (pack_size // multiple) * multiple
    kept = {s.id: s for s in samples if 2 <= len(s.input_ids) <= limit + 1}
    unpacked = {}
    for b in bins:
        assert bin_problems(b.input_ids, b.loss_mask, b.seq_start_id, pack_size) == []
        for member, (ids, mask) in zip(b.members, unpack_bin(b.input_ids, b.loss_mask, b.seq_start_id)):
            assert (len(ids) - 1) % multiple == 0
            unpacked[member.id] = (ids, mask)
    assert unpacked.keys() == kept.keys()
    for key, (ids, mask) in unpacked.items():
        original = kept[key]
        n = len(original.input_ids)
        assert ids[:n].tolist() == original.input_ids.tolist() and (ids[n:] == 1).all()
        assert mask.tolist() == original.assistant_mask[1:].tolist() + [0] * (len(ids) - n + 1)
    assert stats.samples == len(kept) and stats.samples_in == len(samples)
    assert stats.tokens == sum(len(b.input_ids) for b in bins)
    assert stats.trained_tokens == sum(int(b.loss_mask.sum()) for b in bins)
    assert sum(stats.dropped.values()) == len(samples) - len(kept)


# --- checks ----------------------------------------------------------------------------------------------------------


def test_bin_problems_flags_each_broken_rule():
    ids, mask, starts = np.arange(6), np.array([1, 0, 1, 1, 0, 0]), np.array([0, 2])
    assert bin_problems(ids, mask, starts, pack_size=4) == []
    assert "exceeds pack_size 3" in bin_problems(ids, mask, starts, pack_size=3)[0]
    assert "must start with 0" in bin_problems(ids, mask, np.array([1, 3]), 8)[0]
    assert ">= 2 tokens" in bin_problems(ids, mask, np.array([0, 5]), 8)[0]
    assert ">= 2 tokens" in bin_problems(ids, mask, np.array([0, 4, 2]), 8)[0]
    assert "last loss_mask position" in bin_problems(ids, np.array([1, 1, 1, 1, 0, 0]), starts, 8)[0]
    assert "other than 0 and 1" in bin_problems(ids, np.array([2, 0, 1, 1, 0, 0]), starts, 8)[0]
    assert "loss_mask has 5" in bin_problems(ids, mask[:5], starts, 8)[0]


def test_compare_samples_finds_missing_extra_and_changed_samples():
    planned = [(("d", "a", 0, 0), "x"), (("d", "b", 0, 0), "y"), (("d", "c", 0, 0), "z"), (("d", "c", 1, 0), "v")]
    assert compare_samples(iter(planned), planned) == []
    problems = compare_samples([(("d", "a", 0, 0), "x"), (("d", "b", 0, 0), "CHANGED"), (("d", "q", 0, 0), "w"),
                                (("d", "c", 1, 0), "v")], planned)
    assert any("('d', 'b', 0, 0) differs" in p for p in problems)
    assert any("('d', 'q', 0, 0) was not planned" in p for p in problems)
    assert any("('d', 'c', 0, 0) is missing" in p for p in problems)


def test_planned_digest_is_the_stored_sample_digest():
    s = sample(0, [3, 4, 5], [0, 1, 1])
    (only,), _ = pack([s], pack_size=8)
    (ids, mask), = unpack_bin(only.input_ids, only.loss_mask, only.seq_start_id)
    assert planned_digest(s, PackSettings(pack_size=8)) == sample_digest(ids, mask)
    assert planned_digest(sample(1, [3], [0]), PackSettings(pack_size=8)) is None


def test_masked_role_problems_on_unshifted_spans():
    mask = unshift_mask(np.array([0, 0, 1, 1, 0], dtype=np.uint8))  # tokens 3 and 4 trained
    assert mask.tolist() == [0, 0, 0, 1, 1]
    assert masked_role_problems(mask, [(0, 3)]) == []
    assert masked_role_problems(mask, [(0, 3), (4, 5)], "s1") == ["s1: 1 trained token(s) in masked span [4, 5)"]


@pytest.mark.parametrize("bad, match", [
    ({"ids": [1, 2], "mask": [1]}, "equal length"),
    ({"ids": [1, 2], "mask": [0, 2]}, "only 0 and 1"),
    ({"ids": [-1, 2], "mask": [0, 1]}, "outside int32"),
    ({"ids": [1.5, 2.0], "mask": [0, 1]}, "must be integers"),
])
def test_malformed_samples_are_refused_naming_the_sample(bad, match):
    broken = PackSample("x7", "math", 12, np.array(bad["ids"]), np.array(bad["mask"]))
    with pytest.raises(ValueError, match=match) as error:
        list(pack_samples([broken], PackSettings()))
    assert "sample 'x7' (dataset 'math', row 12)" in str(error.value)


@pytest.mark.parametrize("bad, match", [
    ({"packing": "best_fit"}, "sft.packing"), ({"overlong": "split"}, "sft.overlong"),
    ({"pack_size": 0}, "sft.pack_size"), ({"pack_window": 0}, "sft.pack_window"),
    ({"pad_to_multiple": 2}, "pad id"), ({"pack_size": 4, "pad_to_multiple": 8, "pad_id": 0}, "exceeds"),
])
def test_bad_settings_are_refused(bad, match):
    with pytest.raises(ValueError, match=match):
        PackSettings(**bad)


@given(st.integers(0, 5000), st.integers(1, 700))
def test_shards_of_a_split_are_as_few_as_fit_and_even(bins, bins_per_shard):
    from nemotron_assets.defs.sft.plan_step import shard_bounds

    bounds = shard_bounds(bins, bins_per_shard)
    assert len(bounds) == -(-bins // bins_per_shard)
    assert [b for first, end in bounds for b in range(first, end)] == list(range(bins))
    sizes = [end - first for first, end in bounds]
    assert all(size <= bins_per_shard for size in sizes) and (not sizes or max(sizes) - min(sizes) <= 1)
