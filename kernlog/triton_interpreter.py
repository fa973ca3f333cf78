"""CPU-interpreter shim: lets a Triton kernel loop over a runtime scalar (`range(0, n, BLOCK)`).

Triton 3.6's interpreter holds scalar arguments as 1-element arrays and converts them for
range() with int(array), which NumPy >= 2.3 refuses ("only 0-dimensional arrays can be
converted to Python scalars"). Apply it only on the CPU path; compiled kernels never see it.
(Same fix as kernels/matmul_relu/interpreter_compat.py, shared here for every operator.)
"""
import functools

_applied = False


def apply() -> None:
    global _applied
    if _applied:
        return
    from triton.runtime import interpreter

    original = interpreter._patch_lang_tensor

    @functools.wraps(original)
    def patched(tensor, scope):
        original(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.reshape(-1)[0]))

    interpreter._patch_lang_tensor = patched
    _applied = True
