import pytest
import torch


@pytest.fixture(
    params=[
        "cpu",
        pytest.param(
            "cuda", marks=[pytest.mark.cuda, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]
        ),
    ]
)
def device(request):
    return torch.device(request.param)


def rotation(dim: int, seed: int) -> torch.Tensor:
    """A random orthogonal matrix (float64, CPU)."""
    g = torch.Generator().manual_seed(seed)
    q, r = torch.linalg.qr(torch.randn(dim, dim, generator=g, dtype=torch.float64))
    return q * torch.sign(torch.diagonal(r))


@pytest.fixture
def make_rotation():
    return rotation


@pytest.fixture
def gaussian():
    """gaussian(n, dim, seed) -> standard normal samples (float64, CPU)."""

    def draw(n: int, dim: int, seed: int) -> torch.Tensor:
        return torch.randn(n, dim, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)

    return draw


@pytest.fixture(autouse=True)
def _one_thread():
    """Run on one thread: on shared cores, multithreaded small tensor operations slow down by one
    to two orders of magnitude whenever another process is busy."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)
