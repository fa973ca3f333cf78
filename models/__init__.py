"""Models built on kernlog's operators: the library's kernels used in a real forward pass (issue 21)."""
