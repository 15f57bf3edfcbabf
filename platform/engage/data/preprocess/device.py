"""Where window operators run: the spec's choice, the machine, and a GPU memory guard.

``gpu`` on a machine without CUDA is a spec error; ``auto`` quietly means the CPU there.
On a GPU, preprocessing shares memory with training, so before each chunk the guard reads
the free device memory and falls back to the CPU (saying so) when it is below a margin.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from engage.errors import SpecError

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)

MARGIN_FRACTION = 0.2
"""Share of the device's total memory the guard always leaves free for training."""

EXPANSION = 8
"""Peak working memory of a chunk, as a multiple of its input bytes (FFT, unfold, copies)."""


def resolve_device(choice: str, cuda_available: bool | None = None) -> torch.device:
    """The device ``data.preprocess_device`` asks for on this machine.

    Parameters
    ----------
    choice : str
        ``"cpu"``, ``"gpu"`` or ``"auto"``.
    cuda_available : bool, optional
        Override for tests; default ``torch.cuda.is_available()``.

    Raises
    ------
    SpecError
        ``choice`` is ``"gpu"`` and there is no CUDA device.
    """
    import torch

    has_gpu = torch.cuda.is_available() if cuda_available is None else cuda_available
    if choice == "cpu" or (choice == "auto" and not has_gpu):
        return torch.device("cpu")
    if not has_gpu:
        raise SpecError(
            "data.preprocess_device: got 'gpu', but this machine has no CUDA GPU",
            hint="use preprocess_device: auto (GPU when present) or cpu",
        )
    return torch.device("cuda")


@dataclass(frozen=True)
class Placement:
    """Where one chunk runs and, after a fall-back, why.

    Attributes
    ----------
    device : torch.device
        The device the chunk runs on.
    note : str or None
        Set when the guard moved the work from the GPU to the CPU.
    """

    device: torch.device
    note: str | None = None


def guard(device: torch.device, needed_bytes: int) -> Placement:
    """Keep ``device`` if it has room for ``needed_bytes`` of work plus the margin, else the CPU.

    Parameters
    ----------
    device : torch.device
        The device chosen by :func:`resolve_device`.
    needed_bytes : int
        Input bytes of the chunk; the guard reserves :data:`EXPANSION` times that.

    Returns
    -------
    Placement
        The device to use, with a note (also logged as a warning) after a fall-back.
    """
    import torch

    if device.type != "cuda":
        return Placement(device)
    free, total = torch.cuda.mem_get_info(device)
    want = EXPANSION * needed_bytes + int(MARGIN_FRACTION * total)
    if free >= want:
        return Placement(device)
    mib = 2**20
    note = (
        f"preprocessing fell back to the CPU: {free // mib} MiB free on {device}, "
        f"{want // mib} MiB needed ({EXPANSION}x the chunk plus a {MARGIN_FRACTION:.0%} margin "
        "kept for training)"
    )
    log.warning(note)
    return Placement(torch.device("cpu"), note)
