"""The tests' kept ptxas reports (tests/helpers.compile_report): a report is reused only while
everything the compile reads is the same."""
from kernlog import cuda

from . import helpers


def test_a_kept_report_is_reused_only_while_nothing_the_compile_reads_changed(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("KERNLOG_TEST_NVCC_CACHE", raising=False)
    version = ["nvcc 13.0"]
    monkeypatch.setattr(helpers, "_nvcc_version", lambda: version[0])
    calls = []
    monkeypatch.setattr(cuda, "compile_report", lambda source, arch: calls.append(arch) or f"report {len(calls)}")
    src, header = tmp_path / "k.cu", tmp_path / "k.cuh"
    header.write_text("#define N 1\n")
    src.write_text('#include "k.cuh"\n__global__ void k() {}\n')

    def report(arch="sm_90"):
        return helpers.compile_report(src, arch)

    assert report() == "report 1" and report() == "report 1" and len(calls) == 1  # kept
    assert report("sm_90a") == "report 2"  # another arch
    header.write_text("#define N 2\n")  # an included file
    assert report() == "report 3" and report() == "report 3"
    src.write_text(src.read_text() + "// edited\n")  # the source
    assert report() == "report 4"
    version[0] = "nvcc 13.1"  # the compiler
    assert report() == "report 5"
    monkeypatch.setenv("KERNLOG_TEST_NVCC_CACHE", "0")  # switched off: compiled every time
    assert report() == "report 6" and report() == "report 7"


def test_a_failed_compile_is_never_kept(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(helpers, "_nvcc_version", lambda: "nvcc 13.0")

    def fails(source, arch):
        raise RuntimeError("nvcc failed")

    monkeypatch.setattr(cuda, "compile_report", fails)
    src = tmp_path / "k.cu"
    src.write_text("__global__ void k() { wgmma; }\n")
    for _ in range(2):
        try:
            helpers.compile_report(src, "sm_90")
        except RuntimeError:
            pass
        else:
            raise AssertionError("a failed compile came back as a report")
    assert not list((tmp_path / "cache").rglob("*.txt"))
