"""The slot-mapped KV cache: slot -1 writes nothing, and a view shares its storage and key positions."""
from __future__ import annotations

import pytest
import torch

from peagle_lab.models.kv_cache import KVCache


def test_slot_mapping_minus_one_writes_nothing():
    cache = KVCache.allocate(num_layers=1, max_batch=2, max_len=4, num_kv_heads=1, head_dim=2,
                             dtype=torch.float32, device="cpu")
    k = torch.arange(1, 4, dtype=torch.float32)[:, None, None].expand(3, 1, 2).contiguous()
    cache.write(0, torch.tensor([5, -1, 0]), k, -k)
    expect = torch.zeros(9, 1, 2)
    expect[5], expect[0] = 1.0, 3.0
    assert torch.equal(cache.k[0][:8], expect[:8])  # row 8 is the trash slot
    assert torch.equal(cache.v[0][:8], -expect[:8])
    # a write of only -1 slots leaves every real slot untouched
    before = cache.k[0][:8].clone()
    cache.write(0, torch.tensor([-1, -1, -1]), k * 10, k * 10)
    assert torch.equal(cache.k[0][:8], before)


def test_a_view_reads_the_storage_and_shares_its_key_positions():
    # a CUDA graph captured through one view is replayed for later views of the same shape: whatever the graph
    # reads must outlive the view (a view's own arange, freed with it, crashed the data generator on the H200)
    cache = KVCache.allocate(num_layers=2, max_batch=4, max_len=8, num_kv_heads=1, head_dim=2,
                             dtype=torch.float32, device="cpu")
    view = cache.view(2, 12)
    assert (view.max_batch, view.max_len, view.trash_slot) == (2, 12, 24)
    assert view.key_positions().tolist() == list(range(12))
    assert view.key_positions().data_ptr() == cache.key_positions().data_ptr()
    assert view.positions is cache.positions and view.kv.data_ptr() == cache.kv.data_ptr()
    view.write(1, torch.tensor([[13]]), torch.ones(1, 1, 2), -torch.ones(1, 1, 2))
    assert cache.k[1][13].tolist() == [[1.0, 1.0]] and cache.v[1][13].tolist() == [[-1.0, -1.0]]
    with pytest.raises(ValueError, match="needs 34 rows; the storage has 33"):
        cache.view(3, 11)
    for rows, max_len in ((0, 8), (2, 0)):
        with pytest.raises(ValueError, match=f"at least 1 block of 1 position; got rows={rows}, max_len={max_len}"):
            cache.view(rows, max_len)
