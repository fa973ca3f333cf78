"""Code shared by the operator folders: kl_cuda.cuh for CUDA C, Triton interpreter shims."""
