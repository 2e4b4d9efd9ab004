"""Choices made for speed on this machine: timed once, cached per machine outside any store, forced for a bug
report, and never far slower than the alternative they were chosen over (the guard)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest

from docpc_retrievers.machine import choices
from docpc_retrievers.machine.cpu import CPU, this_cpu


@pytest.fixture()
def own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh cache folder and no choice remembered in this process (restored afterwards)."""
    monkeypatch.setenv(choices.CACHE_ENV, str(tmp_path / "cache"))
    choices.forget()
    yield tmp_path / "cache"
    choices.forget()


def _sleeper(ms: float, calls: list[str], name: str):
    def run() -> None:
        calls.append(name)
        time.sleep(ms / 1e3)
    return run


def test_the_faster_candidate_wins_by_a_margin_and_is_cached_for_the_machine(own_cache: Path) -> None:
    calls: list[str] = []
    runs = lambda: {"slow": _sleeper(40, calls, "slow"), "fast": _sleeper(2, calls, "fast")}  # noqa: E731
    first = choices.timed_choice("demo", ["slow", "fast"], runs, preferred="slow", margin=1.5, rounds=3)
    assert (first.choice, first.how) == ("fast", "timed")
    assert first.timings_ms["slow"] > 3 * first.timings_ms["fast"]
    saved = json.loads(choices.cache_file().read_text())
    assert saved["machine"]["cpu"]["model"] == this_cpu().model
    assert saved["entries"]["choice:demo"]["choice"] == "fast"
    assert choices.cache_file().parent.parent == own_cache
    choices.forget()
    calls.clear()
    again = choices.timed_choice("demo", ["slow", "fast"], runs, preferred="slow", margin=1.5)
    assert (again.choice, again.how) == ("fast", "cached")
    assert calls == []  # read from the file: nothing timed again


def test_the_preferred_candidate_stays_within_the_margin(own_cache: Path) -> None:
    calls: list[str] = []
    runs = lambda: {"a": _sleeper(12, calls, "a"), "b": _sleeper(10, calls, "b")}  # noqa: E731
    assert choices.timed_choice("close", ["a", "b"], runs, preferred="a", margin=2.0, rounds=2).choice == "a"


def test_a_hopeless_candidate_is_not_timed_again(own_cache: Path) -> None:
    calls: list[str] = []
    runs = lambda: {"cliff": _sleeper(250, calls, "cliff"), "quick": _sleeper(1, calls, "quick")}  # noqa: E731
    choice = choices.timed_choice("cliff", ["cliff", "quick"], runs, preferred="cliff", rounds=5)
    assert choice.choice == "quick"
    assert calls.count("cliff") <= 2 and calls.count("quick") == 6  # the first run, and at most one timed run


def test_a_candidate_that_fails_here_is_left_out(own_cache: Path) -> None:
    def broken() -> None:
        raise RuntimeError("no such kernel in this build")
    choice = choices.timed_choice("broken", ["x", "y"], lambda: {"x": broken, "y": lambda: None}, preferred="x")
    assert (choice.choice, choice.how, choice.timings_ms["x"]) == ("y", "only", None)


def test_another_machine_times_again(own_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    runs = lambda: {"a": _sleeper(1, calls, "a"), "b": _sleeper(1, calls, "b")}  # noqa: E731
    choices.timed_choice("moved", ["a", "b"], runs, preferred="a", rounds=1)
    here = choices.cache_file()
    other = CPU("Another CPU", "x86_64", 64, ("avx2",))
    monkeypatch.setattr(choices, "this_cpu", lambda: other)
    choices.forget()
    calls.clear()
    assert choices.cache_file() != here
    assert choices.timed_choice("moved", ["a", "b"], runs, preferred="a", rounds=1).how == "timed"
    assert calls


def test_an_environment_variable_forces_the_choice_and_a_wrong_name_is_refused(
        own_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runs = lambda: {"a": lambda: None, "b": lambda: None}  # noqa: E731
    monkeypatch.setenv("DEMO_KERNEL", "b")
    assert choices.timed_choice("forced", ["a", "b"], runs, preferred="a", env="DEMO_KERNEL").how == "forced"
    monkeypatch.setenv("DEMO_KERNEL", "c")
    with pytest.raises(ValueError, match="DEMO_KERNEL='c' is not one of a, b"):
        choices.timed_choice("forced", ["a", "b"], runs, preferred="a", env="DEMO_KERNEL")


def test_an_unwritable_or_broken_cache_keeps_the_choice_in_memory(
        own_cache: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    own_cache.parent.mkdir(exist_ok=True)
    own_cache.write_text("a file where the folder should be")
    runs = lambda: {"a": lambda: None}  # noqa: E731
    assert choices.timed_choice("nowhere", ["a"], runs, preferred="a").choice == "a"
    assert "could not save machine choices" in caplog.text
    folder = own_cache.parent / "other"
    monkeypatch.setenv(choices.CACHE_ENV, str(folder))
    choices.forget()
    path = choices.cache_file()
    path.parent.mkdir(parents=True)
    path.write_text("{not json")
    assert choices.timed_choice("nowhere", ["a"], runs, preferred="a").how == "only"
    assert "unreadable machine choices file" in caplog.text
    assert json.loads(path.read_text())["entries"]["choice:nowhere"]["choice"] == "a"  # rewritten whole


def test_an_empty_cache_setting_keeps_choices_in_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(choices.CACHE_ENV, "")
    assert choices.cache_dir() is None and choices.cache_file() is None


def test_the_cpu_is_named_with_only_the_flags_that_matter() -> None:
    cpu = this_cpu()
    assert cpu.model and cpu.architecture and cpu.cores >= 1
    from docpc_retrievers.machine.cpu import RELEVANT_FLAGS

    assert set(cpu.flags) <= set(RELEVANT_FLAGS)
    assert CPU("x", "x86_64", 2, ("avx512_bf16",)).native_bfloat16
    assert CPU("x", "aarch64", 2, ("bf16",)).native_bfloat16
    assert not CPU("x", "x86_64", 2, ("avx2", "avx512f", "avx512_vnni")).native_bfloat16


# The int8 kernels: every choice gives the same products, and the one chosen here is never a cliff.

def test_every_int8_kernel_gives_the_same_exact_products_so_hits_never_depend_on_the_choice() -> None:
    import torch

    from docpc_retrievers.scoring import kernels

    gen = torch.Generator().manual_seed(11)
    rows = torch.randint(-127, 128, (3000, 128), dtype=torch.int8, generator=gen)
    peak = kernels.query_peak()
    q8 = torch.randint(-peak, peak + 1, (25, 128), dtype=torch.int8, generator=gen).numpy()
    q8[0] = peak
    expected = rows.to(torch.int64) @ torch.from_numpy(q8).to(torch.int64).T
    available = kernels.available_kernels()
    assert {"int_mm", "float32"} <= set(available)
    for name, kernel in available.items():
        assert torch.equal(kernel(rows, q8).to(torch.int64), expected), name


@pytest.mark.parametrize("forced", ["int_mm", "float32", "onednn"])
def test_a_forced_kernel_is_the_one_that_multiplies_and_the_scores_are_unchanged(
        forced: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from docpc_retrievers.scoring import kernels
    from docpc_retrievers.scoring.maxsim import maxsim_int8

    if forced not in kernels.available_kernels():
        pytest.skip(f"{forced} gives no exact products on this machine")
    rng = np.random.default_rng(2)
    lengths = [int(n) for n in rng.integers(20, 60, 40)]
    rows = rng.integers(-127, 128, (sum(lengths), 128)).astype(np.int8)
    scales = rng.uniform(0.001, 0.01, sum(lengths)).astype(np.float32)
    query = rng.standard_normal((9, 128)).astype(np.float32)
    default = maxsim_int8(query, rows, scales, lengths, approximate=True)
    used: list[str] = []
    original = kernels.KERNELS[forced]
    monkeypatch.setitem(kernels.KERNELS, forced, lambda r, q: (used.append(forced), original(r, q))[1])
    monkeypatch.setattr(kernels, f"_{forced}", kernels.KERNELS[forced])
    monkeypatch.setenv(kernels.KERNEL_ENV, forced)
    assert kernels.int8_kernel_choice().how == "forced"
    np.testing.assert_array_equal(maxsim_int8(query, rows, scales, lengths, approximate=True), default)
    assert used


def test_guard_the_int8_kernel_chosen_here_is_not_5x_slower_than_another_exact_kernel() -> None:
    """Times every exact kernel on this machine, in this process, against the one searches use. It catches a
    choice made elsewhere that is a cliff here (oneDNN took 213x longer than torch._int_mm on an AMD EPYC with
    AVX-512); forced to the slow kernel (DOCPC_INT8_KERNEL=onednn there) it fails."""
    from docpc_retrievers.scoring import kernels

    choice = kernels.int8_kernel_choice()
    timings = {k: v for k, v in kernels.time_int8_kernels(rounds=7).items() if v is not None}
    fastest = min(timings, key=timings.__getitem__)
    assert timings[choice.choice] <= 5 * timings[fastest], (
        f"the int8 kernel in use ({choice.choice}, {choice.how}) takes {timings[choice.choice]:.2f} ms where "
        f"{fastest} takes {timings[fastest]:.2f} ms on {this_cpu().model} (all: {timings})")


def test_the_approximate_pass_threads_follow_the_choice_made_here(monkeypatch: pytest.MonkeyPatch) -> None:
    from docpc_retrievers.store import shortlist_threads as threads

    monkeypatch.setenv(threads.THREADS_ENV, "one")
    assert threads.shortlist_pool() is None
    monkeypatch.setenv(threads.THREADS_ENV, "threads")
    if threads._started_pool() is not None:
        assert threads.shortlist_pool() is threads._started_pool()
    monkeypatch.delenv(threads.THREADS_ENV)
    choice = threads.threads_choice()
    assert choice.choice in ("one", "threads") and choice.how in ("timed", "cached", "only")


def test_docpc_info_machine_reports_the_cpu_the_kernels_their_timings_and_the_choices(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    env = {**os.environ, "DOCPC_CACHE_DIR": str(tmp_path / "cache")}
    env.pop("DOCPC_INT8_KERNEL", None)
    run = [sys.executable, "-m", "docpc_retrievers.cli", "info", "--machine"]
    first = subprocess.run([*run, "--json"], capture_output=True, text=True, env=env, timeout=300, check=True)
    report = json.loads(first.stdout)
    assert report["cpu"]["model"] == this_cpu().model
    import platform
    from importlib.metadata import version

    assert report["python"] == platform.python_version() and report["os"] == platform.platform()
    assert {k: report["versions"][k] for k in ("chromadb", "transformers", "colpali-engine", "PyMuPDF")} == {
        k: version(k) for k in ("chromadb", "transformers", "colpali-engine", "PyMuPDF")}
    assert report["choices_file_existed"] is False
    int8 = report["int8_kernel"]
    assert int8["how"] in ("timed", "only") and int8["choice"] in int8["available"]
    assert set(int8["timings_ms"]) == set(int8["available"])
    assert Path(report["choices_file"]).is_file()
    second = subprocess.run(run, capture_output=True, text=True, env=env, timeout=300, check=True).stdout
    assert f"int8 kernel        {int8['choice']} (timed earlier on this machine)" in second
    assert this_cpu().model in second and "shortlist threads" in second
    assert second.splitlines()[0].startswith("python") and platform.python_version() in second.splitlines()[0]
    assert f"chromadb {version('chromadb')}" in second and f"PyMuPDF {version('PyMuPDF')}" in second
    forced = subprocess.run([*run, "--json"], capture_output=True, text=True, timeout=300, check=True,
                            env={**env, "DOCPC_INT8_KERNEL": "float32"})
    assert json.loads(forced.stdout)["int8_kernel"]["how"] == "forced"
    again = subprocess.run([*run, "--retime", "--json"], capture_output=True, text=True, env=env, timeout=300,
                           check=True)
    assert json.loads(again.stdout)["int8_kernel"]["how"] in ("timed", "only")
    bare = subprocess.run([sys.executable, "-m", "docpc_retrievers.cli", "info"], capture_output=True, text=True,
                          env=env, timeout=300, check=False)
    assert bare.returncode == 2 and "--machine" in bare.stderr


def test_one_slow_run_on_a_busy_moment_does_not_decide(own_cache: Path) -> None:
    """A candidate whose first run hit a busy moment (400 ms, its usual 1 ms) is run once more before it is given up
    on, so the choice and its cached timing are its usual speed, not the noise."""
    calls: list[str] = []
    first = [True]

    def spiky() -> None:
        calls.append("spiky")
        time.sleep(0.4 if first[0] else 0.001)
        first[0] = False

    runs = lambda: {"spiky": spiky, "steady": _sleeper(2, calls, "steady")}  # noqa: E731
    choice = choices.timed_choice("spiky", ["spiky", "steady"], runs, preferred="spiky", rounds=3)
    assert choice.choice == "spiky" and choice.timings_ms["spiky"] < 50
