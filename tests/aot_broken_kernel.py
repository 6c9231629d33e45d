"""A kernel that cannot run on any GPU here: one 256 × 256 float32 tile product wants about 513 KiB of
shared memory. ``tests/test_kernels_aot.py`` builds it through the kernels-aot check to see the check fail."""
import torch

from peagle_lab.kernels.backend import triton

if triton is not None:
    import triton.language as tl

    @triton.jit
    def _too_wide_kernel(a_ptr, b_ptr, out_ptr, BLOCK: tl.constexpr):
        i = tl.arange(0, BLOCK)
        tile = i[:, None] * BLOCK + i[None, :]
        tl.store(out_ptr + tile, tl.dot(tl.load(a_ptr + tile), tl.load(b_ptr + tile)))


def sweep():
    """The one launch its wrapper would make."""
    x = torch.empty(256, 256, device="meta")
    _too_wide_kernel[(1,)](x, x, x, BLOCK=256)
