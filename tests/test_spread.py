"""Work spread over GPUs and over processes, on the CPU: revisions dealt out to GPUs by weight,
one job per GPU at a time, each process told its GPU, a failing GPU named after the others
end, and saves of processes side by side taking turns."""
import os
import sys
import threading
import time

import pytest

from kernlog.errors import KernlogError
from kernlog.registry import load_kernel
from kernlog.run import fanout
from kernlog.store import profiles as store

from .helpers import ROOT, make_record


def test_deal_balances_weight_and_keeps_each_groups_order():
    items = ["a", "B", "c", "D", "e", "F"]  # capitals weigh 2
    groups = fanout.deal(items, 2, weight=lambda x: 2 if x.isupper() else 1)
    assert sorted(x for g in groups for x in g) == sorted(items)
    loads = [sum(2 if x.isupper() else 1 for x in g) for g in groups]
    assert max(loads) - min(loads) <= 1
    assert all(g == [x for x in items if x in g] for g in groups)
    assert fanout.deal(["a"], 3) == [["a"]]  # no empty groups
    heavy_last = [1, 1, 1, 1, 4]  # heaviest first: 4 alone against the four 1s, not 6 against 2
    assert sorted(sum(g) for g in fanout.deal(heavy_last, 2, weight=lambda x: x)) == [4, 4]


def test_each_gpu_runs_one_job_at_a_time_and_all_gpus_are_used():
    running, most, lock, used = {}, {}, threading.Lock(), []

    def work(job, gpu):
        with lock:
            running[gpu] = running.get(gpu, 0) + 1
            most[gpu] = max(most.get(gpu, 0), running[gpu])
            used.append(gpu)
        time.sleep(0.05)
        with lock:
            running[gpu] -= 1
        return job * 10

    assert fanout.on_gpus([1, 2, 3, 4, 5], ["0", "1"], work) == [10, 20, 30, 40, 50]
    assert set(used) == {"0", "1"} and max(most.values()) == 1


def test_an_error_in_one_job_is_raised_after_the_others_end():
    done = []

    def work(job, gpu):
        if job == 1:
            raise KernlogError("boom")
        time.sleep(0.05)
        done.append(job)

    with pytest.raises(KernlogError, match="boom"):
        fanout.on_gpus([1, 2, 3], ["0", "1"], work)
    assert sorted(done) == [2, 3]


def test_visible_gpus_follow_cuda_visible_devices_and_the_first_model(tmp_path, monkeypatch):
    smi = tmp_path / "nvidia-smi"
    smi.write_text('#!/bin/sh\n[ "$1 $2" = "--query-gpu=index,uuid,compute_mode,name --format=csv,noheader" ] '
                   "|| exit 1\n"
                   "echo '0, GPU-aaa, Default, NVIDIA H200'\necho '1, GPU-bbb, Default, NVIDIA H200'\n"
                   "echo '2, GPU-ccc, Default, NVIDIA H100 80GB HBM3'\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert fanout.visible_gpus() == ["0", "1"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,GPU-bbb")
    assert fanout.visible_gpus() == ["2"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert fanout.visible_gpus() == []


def test_run_streams_stderr_and_stops_at_its_timeout(tmp_path):
    said = []
    code, out = fanout.run([sys.executable, "-c", "import os, sys; print('out', os.getcwd(), os.environ['KL_T']); "
                            "print('err1', file=sys.stderr); print('err2', file=sys.stderr); sys.exit(3)"],
                           dict(os.environ, KL_T="seen"), 60, said.append, "[gpu 1] ", cwd=tmp_path)
    assert code == 3 and said == ["[gpu 1] err1", "[gpu 1] err2"]
    assert out == f"out {tmp_path} seen\nerr1\nerr2\n"  # its cwd and env, stdout then stderr whole
    assert fanout.run(["/nonexistent/kl"], dict(os.environ), 5)[0] == 127
    code, out = fanout.run([sys.executable, "-c", "import time; time.sleep(30)"], dict(os.environ), 0.5)
    assert code == 124 and "no result in" in out


def test_profile_on_gpus_gives_each_process_its_gpu_and_names_the_one_that_failed(tmp_path):
    kernel = load_kernel(ROOT, "softmax")
    revs = [kernel.revision(n) for n in ("v0_naive", "v1_block_smem", "triton", "torch_compile")]
    calls = []

    def runner(cmd, env, timeout, progress, prefix):
        assert cmd[:6] == [sys.executable, "-m", "kernlog", "--root", str(tmp_path), "profile"]
        assert cmd[6] == "softmax" and cmd[-4:] == ["--dtype", "fp32", "--gpus", "1"]
        got = [cmd[i + 1] for i, a in enumerate(cmd) if a == "--rev"]
        calls.append((env["CUDA_VISIBLE_DEVICES"], got, cmd[cmd.index("--gpus") + 1]))
        assert env["OMP_NUM_THREADS"] == str(max(1, (os.cpu_count() or 1) // 2))
        if "torch_compile" in got:
            return 3, "kernlog: 1 revision(s) failed the correctness gate"
        return 0, "".join(f"profiles/g/softmax/{r}.8x8.fp32.json\n" for r in got)

    with pytest.raises(KernlogError, match=r"profiling failed on GPU (\d) \(exit 3: kernlog: 1 revision"):
        fanout.profile_on_gpus(tmp_path, "softmax", revs, ["--dtype", "fp32"], ["0", "1"], lambda s: None, runner)
    assert sorted(g for g, _, _ in calls) == ["0", "1"] and {n for _, _, n in calls} == {"1"}
    dealt = {g: r for g, r, _ in calls}
    assert sorted(r for rs in dealt.values() for r in rs) == sorted(r.name for r in revs)
    assert all(len(r) == 2 for r in dealt.values())  # the two compile-heavy ones split between the GPUs
    assert all({"triton", "torch_compile"} - set(r) for r in dealt.values())


def test_a_save_waits_for_another_process_holding_the_folder(tmp_path):
    rec = make_record("torch")
    folder = store.kernel_dir(tmp_path, rec["gpu"]["slug"], "softmax")
    report = tmp_path / "r.ncu-rep"
    report.write_bytes(b"report")
    done = threading.Event()
    with store.folder_lock(folder):
        t = threading.Thread(target=lambda: (store.save_profile(tmp_path, rec, report, force=False), done.set()))
        t.start()
        time.sleep(0.3)
        assert not done.is_set()  # blocked on the lock, nothing written yet
        assert not list(folder.glob("*.json"))
    t.join(30)
    assert done.is_set() and list(folder.glob("*.json"))


def test_each_process_gets_its_gpu_and_its_share_of_the_cpu_threads(monkeypatch):
    monkeypatch.setattr(os, "cpu_count", lambda: 32)
    env = fanout.child_env("1", 2)
    assert env["CUDA_VISIBLE_DEVICES"] == "1" and env["OMP_NUM_THREADS"] == env["MKL_NUM_THREADS"] == "16"
    assert fanout.child_env("0", 64)["OMP_NUM_THREADS"] == "1"


def test_profile_on_gpus_returns_what_each_process_wrote_and_weighs_compiled_kinds_twice(tmp_path):
    kernel = load_kernel(ROOT, "softmax")
    revs = [kernel.revision(n) for n in ("v0_naive", "v1_block_smem", "triton")]
    seen, said = {}, []

    def runner(cmd, env, timeout, progress, prefix):
        got = [cmd[i + 1] for i, a in enumerate(cmd) if a == "--rev"]
        seen[env["CUDA_VISIBLE_DEVICES"]] = got
        assert timeout == 3600.0
        progress(prefix + "gate")
        return 0, "".join(f"profiles/g/softmax/{r}.8x8.fp32.json\n" for r in got) + "skip x: profiles/ note\n"

    written = fanout.profile_on_gpus(tmp_path, "softmax", revs, [], ["0", "1"], said.append, runner)
    assert sorted(seen.values()) == [["triton"], ["v0_naive", "v1_block_smem"]]  # 2 against 1 + 1
    assert sorted(p.name for p in written) == sorted(f"{r.name}.8x8.fp32.json" for r in revs)
    assert all(p.parent == tmp_path / "profiles" / "g" / "softmax" for p in written)
    assert sorted(s for s in said if s.endswith("gate")) == ["[gpu 0] gate", "[gpu 1] gate"]
