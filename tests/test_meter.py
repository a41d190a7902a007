"""The live-memory meter (autograder/worker/meter.py, shipped to students as memory_meter.py) counts only new
storage: what the notebooks and its docstring promise ("the inputs you pass in are not measured")."""
from __future__ import annotations

import torch

from autograder.worker.meter import LiveMemoryMeter

MIB = 2**20


def test_a_slice_of_a_big_input_charges_nothing():
    big = torch.zeros(4 * MIB // 4)  # 16 MiB of float32, made before the meter starts
    with LiveMemoryMeter() as meter:
        piece = big[:1024]  # 4 KiB view: no new storage
        rows = big.view(1024, -1).t()[:3]  # a reshape, a transpose and a slice: still views
    assert piece.untyped_storage().data_ptr() == big.untyped_storage().data_ptr()
    assert rows.shape[0] == 3
    assert meter.peak_bytes == 0


def test_a_new_tensor_charges_its_bytes_and_not_the_input_it_came_from():
    big = torch.zeros(4 * MIB // 4)
    with LiveMemoryMeter() as meter:
        doubled = big[:1024] * 2  # 4 KiB of new storage computed from a 16 MiB input
    assert meter.peak_bytes == doubled.untyped_storage().nbytes() == 4096


def test_writing_into_an_input_in_place_charges_nothing():
    big = torch.zeros(1024, 1024)
    with LiveMemoryMeter() as meter:
        big[:10].add_(1.0)
        big.mul_(2.0)
    assert meter.peak_bytes == 0
    assert big[0, 0].item() == 2.0


def test_a_copy_of_an_input_is_charged_in_full():
    x = torch.zeros(256, 512)
    with LiveMemoryMeter() as meter:
        x.t().contiguous()  # a transpose is a view; making it contiguous copies all 512 KiB
    assert meter.peak_bytes == x.nbytes == 512 * 1024


def test_views_of_a_tensor_made_inside_are_counted_once_and_freed_storage_leaves_the_live_figure():
    with LiveMemoryMeter() as meter:
        a = torch.zeros(1000)  # 4000 bytes
        a[:10].view(2, 5).t()  # views of a: no more
        assert meter.live_bytes == 4000
        del a
        b = torch.zeros(500)  # 2000 bytes, after a was freed
    assert (meter.peak_bytes, meter.live_bytes) == (4000, 2000)
    assert b.numel() == 500


def test_a_tensor_literal_made_inside_is_charged():
    with LiveMemoryMeter() as meter:
        t = torch.tensor([1.0, 2.0, 3.0, 4.0], dtype=torch.float64)
    assert meter.peak_bytes == t.nbytes == 32
