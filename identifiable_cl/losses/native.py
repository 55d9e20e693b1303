"""The C kernels of ``pairwise.c``: built at first use with the machine's C compiler, called through ctypes.

:func:`forward` and :func:`backward` compute on CPU what ``block_forward`` and ``block_backward``
of ``identifiable_cl.losses.blocked`` compute with torch operations, each in one pass over the
(b, N) block that stays in cache row by row (the torch version makes about ten passes through
memory). Exponentials use glibc's vector ``exp`` (libmvec) where the CPU has AVX2 or AVX-512, else
the C library's ``exp``. On x86 subnormal values are flushed to zero inside the kernels (see
``pairwise.c``): products of the smallest kept exponentials with the row weights fall below the
normal range, and some CPUs slow down several-fold on them. Rows are split among OpenMP threads;
the library is loaded after torch and so shares torch's OpenMP runtime and its
``torch.get_num_threads()`` threads.

The shared library is built once per source, compiler and CPU (``-O3 -march=native``, no
floating-point contraction, so the Lp similarities are bit for bit those of the eager kernels)
into ``$ICL_CACHE`` or ``~/.cache/identifiable_cl``. :func:`available` is False, and the eager
torch kernels are used, where no compiler is found or the build fails; ``ICL_NATIVE=0`` turns
the C kernels off.
"""

from __future__ import annotations

import ctypes
import hashlib
import math
import os
import platform
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

import torch
from torch import Tensor

SOURCE = Path(__file__).with_name("pairwise.c")
FLAGS = ["-O3", "-march=native", "-fopenmp-simd", "-ffp-contract=off", "-fno-math-errno", "-fPIC", "-shared"]
VARIANTS = tuple(wide + rest for rest in (["-fopenmp", "-lmvec", "-lm"], ["-fopenmp", "-lm"], ["-lmvec", "-lm"], ["-lm"])
                 for wide in (["-mprefer-vector-width=512"], []))
"""Tried in order: with OpenMP threads and libmvec's vector exp, then without either; each first with
512-bit vectors preferred (used where the CPU has AVX-512)."""
POWERS = {"dot": 0, "l1": 1, "l2": 2, "l3": 3}

_lock = threading.Lock()
_state: dict[str, object] = {}


def _cpu_signature() -> str:
    try:
        text = Path("/proc/cpuinfo").read_text()
        flags = next((line for line in text.splitlines() if line.startswith(("flags", "Features"))), "")
    except OSError:
        flags = ""
    return f"{platform.machine()} {flags}"


def _build() -> ctypes.CDLL | None:
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if compiler is None or platform.system() == "Windows":
        return None
    key = hashlib.sha256(
        SOURCE.read_bytes() + repr([compiler, FLAGS, VARIANTS, _cpu_signature()]).encode()
    ).hexdigest()[:16]
    cache = os.environ.get("ICL_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "identifiable_cl")
    target = Path(cache) / f"pairwise-{key}.so"
    if not target.exists():
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
                built = Path(tmp) / target.name
                for extra in VARIANTS:
                    command = [compiler, *FLAGS, str(SOURCE), "-o", str(built), *extra]
                    if subprocess.run(command, capture_output=True, timeout=120).returncode == 0:
                        break
                else:
                    return None
                os.replace(built, target)  # atomic: concurrent builders leave one complete file
        except (OSError, subprocess.SubprocessError):
            return None
    try:
        lib = ctypes.CDLL(str(target))
    except OSError:
        return None
    i64, ptr, i32 = ctypes.c_int64, ctypes.c_void_p, ctypes.c_int
    for suffix, real in (("f32", ctypes.c_float), ("f64", ctypes.c_double)):
        getattr(lib, f"icl_forward_{suffix}").argtypes = [
            ptr, ptr, i64, i64, i64, i32, real, ptr, i32, ptr, real, ptr, ptr, ptr, ptr
        ]
        getattr(lib, f"icl_backward_{suffix}").argtypes = [
            ptr, ptr, i32, ptr, real, ptr, ptr, i64, i64, i64, i32, ptr, ptr, ptr
        ]
    return lib


def _library() -> ctypes.CDLL | None:
    with _lock:
        if "lib" not in _state:
            _state["lib"] = None if os.environ.get("ICL_NATIVE", "1") == "0" else _build()
        return _state["lib"]  # type: ignore[return-value]


def available() -> bool:
    """True when the C kernels are built and loadable (``ICL_NATIVE=0`` turns them off)."""
    return _library() is not None


def supports(*tensors: Tensor) -> bool:
    """The C kernels apply: CPU tensors of float32 or float64, and the library is available."""
    first = tensors[0]
    return (
        first.device.type == "cpu"
        and first.dtype in (torch.float32, torch.float64)
        and all(t.dtype == first.dtype and t.device == first.device for t in tensors)
        and available()
    )


def _suffix(t: Tensor) -> str:
    return "f32" if t.dtype == torch.float32 else "f64"


def _address(t: Tensor | None) -> int | None:
    return None if t is None else t.data_ptr()


def forward(
    a: Tensor, cT: Tensor, scale: Tensor | float, multipliers: tuple[float, ...], excluded: Tensor | None,
    floor: float, kind: str, keep_similarity: bool, workspace: dict[str, Tensor] | None = None,
) -> tuple[Tensor | None, Tensor, Tensor, Tensor]:
    """``block_forward`` on CPU: (sim (b, N) or None, E (M, b, N), top (b, M), sums (b, M)).

    ``a`` (b, d) and ``cT`` (d, N) contiguous; ``excluded``: (b, 2) int64 columns left out per
    row (-1 = none), or None; ``scale`` a float or a one-element tensor (read here: these kernels run on the
    CPU only, where reading a scalar costs nothing). ``workspace``: E and sim are written into the start of its
    buffers when they are large enough (and larger buffers are put there otherwise), so that
    blocks and loss evaluations reuse their memory instead of faulting in fresh pages each time.
    """
    lib = _library()
    b, d = a.shape
    n, m = cT.shape[1], len(multipliers)
    workspace = {} if workspace is None else workspace

    def buffer(name: str, shape: tuple[int, ...]) -> Tensor:
        size = math.prod(shape)
        held = workspace.get(name)
        if held is None or held.numel() < size or held.dtype != a.dtype:
            held = workspace[name] = torch.empty(size, dtype=a.dtype)
        return held[:size].view(shape)

    e = buffer("e", (m, b, n))
    sim = buffer("sim", (b, n)) if keep_similarity else None
    top = torch.empty((b, m), dtype=a.dtype)
    sums = torch.empty((b, m), dtype=a.dtype)
    mults = torch.tensor(multipliers, dtype=a.dtype)
    getattr(lib, f"icl_forward_{_suffix(a)}")(
        a.data_ptr(), cT.data_ptr(), b, d, n, POWERS[kind], float(scale), mults.data_ptr(), m,
        _address(excluded), floor, e.data_ptr(), _address(sim), top.data_ptr(), sums.data_ptr(),
    )
    return sim, e, top, sums


def backward(
    e: Tensor, weights: Tensor, sim: Tensor | None, scale: Tensor | float, a: Tensor, cT: Tensor, kind: str,
) -> tuple[Tensor, Tensor, Tensor | None]:
    """``block_backward`` on CPU: (grad of a (b, d), grad of cT (d, N), grad of the scale or None).

    ``e`` (M, b, N) from :func:`forward`; ``weights`` (b, M) contiguous.
    """
    lib = _library()
    b, d = a.shape
    n, m = cT.shape[1], e.shape[0]
    grad_a = torch.empty((b, d), dtype=a.dtype)
    grad_cT = torch.empty((d, n), dtype=a.dtype)
    d_scale = torch.zeros((), dtype=a.dtype)
    getattr(lib, f"icl_backward_{_suffix(a)}")(
        e.data_ptr(), weights.data_ptr(), m, _address(sim), float(scale), a.data_ptr(), cT.data_ptr(),
        b, d, n, POWERS[kind], grad_a.data_ptr(), grad_cT.data_ptr(), d_scale.data_ptr(),
    )
    return grad_a, grad_cT, None if sim is None else d_scale
