"""The all-reduce probe interleaves its sizes, so load that comes and goes meets each alike."""

from __future__ import annotations

import socket

import torch.distributed as dist

from engage.train.scaling import netprobe


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_every_repeat_runs_every_size_and_the_order_alternates(monkeypatch) -> None:
    worker = netprobe._ProbeWorker()
    worker.join(_port(), 0, 1)  # a real gloo group of one process
    order: list[int] = []
    real = dist.all_reduce

    def recording(tensor, *args, **kwargs):
        order.append(tensor.numel() * 4)
        return real(tensor, *args, **kwargs)

    monkeypatch.setattr(dist, "all_reduce", recording)
    try:
        sizes = [1 << 12, 1 << 18, 1 << 21]
        got = worker.time_allreduce(sizes, repeats=3)
    finally:
        dist.destroy_process_group()

    assert {s: len(t) for s, t in got.items()} == {s: 3 for s in sizes}
    assert all(t > 0 for times in got.values() for t in times)
    # A warm-up of each size, then 3 repeats of all sizes, reversed on odd repeats: never
    # one size's repeats back to back (a burst of other work would meet only that size).
    forward, back = sizes, sizes[::-1]
    assert order == forward + back + forward + back
