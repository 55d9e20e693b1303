"""The C kernels of ``pairwise.c``: built at first use with the machine's C compiler, called through ctypes.

``forward`` and ``backward`` compute on CPU what ``identifiable_cl.losses.blocked.block_forward``
and ``block_backward`` compute with torch operations, each in one pass over the (b, N) block
that stays in cache row by row (the torch version makes about ten passes through memory);
``similarity`` and ``gradients`` are their similarity parts. Exponentials use glibc's vector
``exp`` (libmvec) where the CPU has AVX2, else the C library's ``exp``. Rows are split among ``torch.get_num_threads()`` threads (ctypes
releases the GIL during a call). The shared library is built once per source, compiler and CPU
(``-O3 -march=native``, no floating-point contraction, so the sums are those of the eager
kernels) into ``$ICL_CACHE`` or ``~/.cache/identifiable_cl``; :func:`available` is False, and
the eager torch kernels are used, where no compiler is found or the build fails.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch
from torch import Tensor

SOURCE = Path(__file__).with_name("pairwise.c")
FLAGS = ["-O3", "-march=native", "-fopenmp-simd", "-ffp-contract=off", "-fno-math-errno", "-fPIC", "-shared"]
LIBS = ["-lmvec", "-lm"]
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


def _cache_dir() -> Path:
    root = os.environ.get("ICL_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "identifiable_cl")
    return Path(root)


def _build() -> ctypes.CDLL | None:
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if compiler is None or platform.system() == "Windows":
        return None
    key = hashlib.sha256(
        SOURCE.read_bytes() + " ".join([compiler, *FLAGS, _cpu_signature()]).encode()
    ).hexdigest()[:16]
    target = _cache_dir() / f"pairwise-{key}.so"
    if not target.exists():
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
                built = Path(tmp) / target.name
                for libs in (LIBS, ["-lm"]):  # without libmvec the C code uses scalar exp
                    command = [compiler, *FLAGS, str(SOURCE), "-o", str(built), *libs]
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
        getattr(lib, f"icl_sim_{suffix}").argtypes = [ptr, ptr, ptr, i64, i64, i64, i32]
        getattr(lib, f"icl_grad_{suffix}").argtypes = [ptr, ptr, ptr, ptr, ptr, i64, i64, i64, i32]
        getattr(lib, f"icl_forward_{suffix}").argtypes = [
            ptr, ptr, i64, i64, i64, i32, real, ptr, i32, ptr, real, ptr, i64, ptr, ptr, ptr
        ]
        getattr(lib, f"icl_backward_{suffix}").argtypes = [
            ptr, i64, ptr, i32, ptr, real, ptr, ptr, i64, i64, i64, i32, ptr, ptr, ptr
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


def _pool(threads: int) -> ThreadPoolExecutor:
    pool = _state.get("pool")
    if pool is None or _state.get("threads") != threads:
        if pool is not None:
            pool.shutdown(wait=True)  # type: ignore[union-attr]
        pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="icl-kernel")
        _state["pool"], _state["threads"] = pool, threads
    return pool  # type: ignore[return-value]


def _chunks(rows: int) -> list[tuple[int, int]]:
    threads = max(1, min(torch.get_num_threads(), rows))
    step = -(-rows // threads)
    return [(r, min(rows, r + step)) for r in range(0, rows, step)]


def _suffix(t: Tensor) -> str:
    return "f32" if t.dtype == torch.float32 else "f64"


def _parallel(calls: list) -> None:
    if len(calls) == 1:
        calls[0]()
        return
    for future in [_pool(len(calls)).submit(call) for call in calls]:
        future.result()


def similarity(a: Tensor, cT: Tensor, kind: str) -> Tensor:
    """sim(a_i, c_j) (b, N) for a (b, d), cT (d, N) contiguous: aᵀc or -||a - c||_p^p."""
    lib, p = _library(), POWERS[kind]
    b, d = a.shape
    n = cT.shape[1]
    out = torch.empty((b, n), dtype=a.dtype)
    fn = getattr(lib, f"icl_sim_{_suffix(a)}")
    size = a.element_size()
    calls = [
        (lambda r0=r0, r1=r1: fn(a.data_ptr() + r0 * d * size, cT.data_ptr(), out.data_ptr() + r0 * n * size,
                                 r1 - r0, d, n, p))
        for r0, r1 in _chunks(b)
    ]
    _parallel(calls)
    return out


def gradients(g: Tensor, a: Tensor, cT: Tensor, kind: str) -> tuple[Tensor, Tensor]:
    """(Σ_j g_ij ∂sim_ij/∂a_i (b, d), Σ_i g_ij ∂sim_ij/∂c_j as (d, N)) for g (b, N) contiguous."""
    lib, p = _library(), POWERS[kind]
    b, d = a.shape
    n = cT.shape[1]
    chunks = _chunks(b)
    grad_a = torch.empty((b, d), dtype=a.dtype)
    grad_cT = torch.zeros((len(chunks), d, n), dtype=a.dtype)
    fn = getattr(lib, f"icl_grad_{_suffix(a)}")
    size = a.element_size()
    calls = [
        (lambda t=t, r0=r0, r1=r1: fn(g.data_ptr() + r0 * n * size, a.data_ptr() + r0 * d * size, cT.data_ptr(),
                                      grad_a.data_ptr() + r0 * d * size, grad_cT[t].data_ptr(), r1 - r0, d, n, p))
        for t, (r0, r1) in enumerate(chunks)
    ]
    _parallel(calls)
    return grad_a, grad_cT.sum(0) if len(chunks) > 1 else grad_cT[0]


def _address(t: Tensor | None, offset: int = 0) -> int | None:
    """Address of element ``offset`` of a contiguous tensor (None for no tensor)."""
    return None if t is None else t.data_ptr() + offset * t.element_size()


def forward(
    a: Tensor, cT: Tensor, scale: float, multipliers: tuple[float, ...], excluded: Tensor | None,
    floor: float, kind: str, keep_similarity: bool,
) -> tuple[Tensor | None, Tensor, Tensor, Tensor]:
    """``block_forward`` on CPU: (sim (b, N) or None, E (M, b, N), top (b, M), sums (b, M)).

    ``excluded``: (b, 2) int64 columns left out per row (-1 = none), or None.
    """
    lib, p = _library(), POWERS[kind]
    b, d = a.shape
    n, m = cT.shape[1], len(multipliers)
    e = torch.empty((m, b, n), dtype=a.dtype)
    sim = torch.empty((b, n), dtype=a.dtype) if keep_similarity else None
    top = torch.empty((b, m), dtype=a.dtype)
    sums = torch.empty((b, m), dtype=a.dtype)
    mults = torch.tensor(multipliers, dtype=a.dtype)
    fn = getattr(lib, f"icl_forward_{_suffix(a)}")
    calls = [
        (lambda r0=r0, r1=r1: fn(
            _address(a, r0 * d), cT.data_ptr(), r1 - r0, d, n, p, scale, mults.data_ptr(), m,
            _address(excluded, 2 * r0), floor, _address(e, r0 * n), b, _address(sim, r0 * n),
            _address(top, r0 * m), _address(sums, r0 * m),
        ))
        for r0, r1 in _chunks(b)
    ]
    _parallel(calls)
    return sim, e, top, sums


def backward(
    e: Tensor, weights: Tensor, sim: Tensor | None, scale: float, a: Tensor, cT: Tensor, kind: str,
) -> tuple[Tensor, Tensor, Tensor | None]:
    """``block_backward`` on CPU: (grad of a (b, d), grad of cT (d, N), grad of the scale or None)."""
    lib, p = _library(), POWERS[kind]
    b, d = a.shape
    n, m = cT.shape[1], e.shape[0]
    chunks = _chunks(b)
    grad_a = torch.empty((b, d), dtype=a.dtype)
    grad_cT = torch.zeros((len(chunks), d, n), dtype=a.dtype)
    d_scale = torch.zeros(len(chunks), dtype=a.dtype)
    fn = getattr(lib, f"icl_backward_{_suffix(a)}")
    calls = [
        (lambda t=t, r0=r0, r1=r1: fn(
            _address(e, r0 * n), b, _address(weights, r0 * m), m, _address(sim, r0 * n), scale,
            _address(a, r0 * d), cT.data_ptr(), r1 - r0, d, n, p, _address(grad_a, r0 * d),
            grad_cT[t].data_ptr(), _address(d_scale, t),
        ))
        for t, (r0, r1) in enumerate(chunks)
    ]
    _parallel(calls)
    total_cT = grad_cT.sum(0) if len(chunks) > 1 else grad_cT[0]
    return grad_a, total_cT, None if sim is None else d_scale.sum()
