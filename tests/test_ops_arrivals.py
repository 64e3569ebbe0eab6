"""The arrival-counter buffer the one-launch kernels share per device."""

import torch

from trtllm_replayssm.ops._arrivals import arrival_counters


def _never():
    raise AssertionError("no CUDA-graph capture on this device")


def test_arrival_counters_are_zeroed_cached_and_grown():
    cache = {}
    cpu = torch.device("cpu")
    first = arrival_counters(cache, 10, cpu, _never)
    assert first.dtype == torch.int32 and first.numel() == 1024 and not first.any()
    assert arrival_counters(cache, 1024, cpu, _never) is first  # reused up to its size
    grown = arrival_counters(cache, 3000, cpu, _never)
    assert grown.numel() == 3000 and not grown.any() and cache[cpu] is grown
    assert arrival_counters(cache, 5, cpu, _never) is grown
    # A count one past the size doubles it: creeping counts replace the buffer only a few times.
    assert arrival_counters(cache, 3001, cpu, _never).numel() == 6000


def test_outgrown_counters_stay_allocated():
    # A CUDA graph captured before the buffer grew still replays against the old one: its memory
    # must not return to the allocator.
    import gc
    import weakref

    cache, cpu = {}, torch.device("cpu")
    first = arrival_counters(cache, 10, cpu, _never)
    ref = weakref.ref(first)
    del first
    arrival_counters(cache, 5000, cpu, _never)
    gc.collect()
    assert ref() is not None and ref().numel() == 1024 and not ref().any()
