"""One root seed split into named, independent streams.

``stream_seed(root, "dgp.mixing")`` depends only on the root seed and the name,
so adding a component never shifts the random numbers of another.
"""

from __future__ import annotations

import hashlib

import torch


def stream_seed(root: int, name: str) -> int:
    """A 63-bit seed derived from ``root`` and the stream ``name``."""
    digest = hashlib.sha256(f"{int(root)}/{name}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


def generator(root: int, name: str, device: torch.device | str = "cpu") -> torch.Generator:
    """A ``torch.Generator`` on ``device`` seeded from the named stream."""
    g = torch.Generator(device=device)
    g.manual_seed(stream_seed(root, name))
    return g
