"""``docpc info --machine``: the CPU, the flags that matter and each machine-dependent choice with the one-time
timings it was made on, one block a user can paste into a bug report."""

from __future__ import annotations

import platform
from typing import Any

from docpc_retrievers.machine.choices import cache_file, forget
from docpc_retrievers.machine.cpu import this_cpu

__all__ = ["machine_report", "machine_report_text"]


def machine_report(*, retime: bool = False) -> dict[str, Any]:
    """Every machine-dependent choice here, as JSON-ready data. ``retime``: drop this machine's cached choices and
    time them again now (after a change of load, say)."""
    import torch

    from docpc_retrievers import __version__
    from docpc_retrievers.encoders.colpali import pick_dtype
    from docpc_retrievers.scoring import kernels
    from docpc_retrievers.store.shortlist_threads import threads_choice

    path = cache_file()
    if retime:
        if path is not None:
            path.unlink(missing_ok=True)
        forget()
    cached_before = path is not None and path.is_file()
    int8 = kernels.int8_kernel_choice()
    threads = threads_choice()
    return {
        "python": platform.python_version(),
        "os": platform.platform(),
        "versions": package_versions(),
        "cpu": this_cpu().to_dict(),
        "native_bfloat16": this_cpu().native_bfloat16,
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "docpc_retrievers": __version__,
        "choices_file": str(path) if path else None,
        "choices_file_existed": cached_before,
        "int8_kernel": {**int8.to_dict(), "available": list(kernels.available_kernels()),
                        "onednn_exact_peak": kernels.onednn_exact_peak(), "query_peak": kernels.query_peak(),
                        "problem": f"{kernels.PROBLEM_ROWS} int8 rows x {kernels.PROBLEM_DIM} by "
                                   f"{kernels.PROBLEM_TOKENS} query tokens"},
        "approximate_pass_threads": threads.to_dict(),
        "encoder_dtype_cpu": str(pick_dtype(None, "cpu")).removeprefix("torch."),
    }


#: The packages whose versions a bug report needs (distribution names).
REPORTED_PACKAGES = ("docpc-retrievers", "torch", "torchvision", "transformers", "colpali-engine", "chromadb",
                     "PyMuPDF", "numpy", "Pillow")


def package_versions() -> dict[str, str]:
    """Each of :data:`REPORTED_PACKAGES` with its installed version, or ``not installed``."""
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for name in REPORTED_PACKAGES:
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = "not installed"
    return out


def _timings(choice: dict[str, Any]) -> str:
    return ", ".join(f"{name} {'-' if ms is None else f'{ms:.2f} ms'}" for name, ms in choice["timings_ms"].items())


def machine_report_text(report: dict[str, Any]) -> str:
    """The report for people: one fact a line."""
    cpu, int8, threads = report["cpu"], report["int8_kernel"], report["approximate_pass_threads"]
    how = {"timed": "timed now", "cached": "timed earlier on this machine", "forced": "forced by the environment",
           "only": "the only one that works here"}
    lines = [
        ("python", f"{report['python']} on {report['os']}"),
        ("versions", ", ".join(f"{k} {v}" for k, v in report["versions"].items())),
        ("cpu", f"{cpu['model']} ({cpu['architecture']}, {cpu['cores']} cores)"),
        ("flags", " ".join(cpu["flags"]) or "none of those that matter"),
        ("torch", f"{report['torch']}, {report['torch_threads']} threads; docpc-retrievers {report['docpc_retrievers']}"),
        ("int8 kernel", f"{int8['choice']} ({how[int8['how']]}); available: {', '.join(int8['available'])}"),
        ("  timings", f"{_timings(int8)} on {int8['problem']}" if int8["timings_ms"] else "not timed"),
        ("  queries", f"rounded to +-{int8['query_peak']} for every kernel (oneDNN exact up to "
                      f"+-{int8['onednn_exact_peak']})" if int8["onednn_exact_peak"] else
                      f"rounded to +-{int8['query_peak']} (no exact oneDNN int8 layer here)"),
        ("shortlist threads", f"{threads['choice']} ({how[threads['how']]})"),
        ("  timings", _timings(threads) if threads["timings_ms"] else "not timed"),
        ("encoder dtype", f"{report['encoder_dtype_cpu']} on this CPU ("
                          + ("native bfloat16" if report["native_bfloat16"] else "no native bfloat16") + ")"),
        ("choices file", report["choices_file"] or "none (DOCPC_CACHE_DIR is empty: kept in memory)"),
    ]
    width = max(len(k) for k, _ in lines)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in lines)
