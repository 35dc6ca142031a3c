"""File fuzzing in a child process, so a crash of the interpreter or a hang in C code (ONNX Runtime
parsing a byte-flipped model) is counted as a finding instead of ending the benchmark.

The child runs :func:`voiced.bench.fuzz_cases.fuzz_files` and reports each case on stdout
("start I", then "done I OUTCOME"); the parent watches. When the child dies (a signal, an exit
without its summary) or stays silent past the time limit, the case it was on is a FAILURE,
its bytes are kept, and a new child resumes after it: the same seed generates the same cases.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from voiced.bench.common import proc_rss_mb
from voiced.bench.fuzz_cases import CASE_TIMEOUT_S, FILE_KINDS
from voiced.bench.fuzz_files import Outcome, Tally

__all__ = ["fuzz_files_isolated", "main"]

_FINDINGS = (Outcome.FAILURE.value, Outcome.UNNAMED_ERROR.value)
_WATCHDOG_S = CASE_TIMEOUT_S * 2 + 30
"""Silence from the child longer than this is a hang the child's own alarm could not break."""


def _rss_mb() -> float:
    return round(proc_rss_mb(os.getpid()), 1)


def fuzz_files_isolated(kind: str, n: int, workdir: Path, run_seed: int, speech: Path | None,
                        models: Path | None, keep: Path | None = None, watchdog_s: float = _WATCHDOG_S,
                        env: dict[str, str] | None = None) -> dict[str, Any]:
    """``n`` cases of ``kind`` in child processes; outcomes, failures and the child's RSS.
    ``env``: extra environment for the child (the self-test's ``VOICED_FUZZ_SELFTEST``)."""
    tally = Tally()
    skip = 0
    restarts = 0
    summary: dict[str, Any] = {}
    while skip < n:
        cmd = [sys.executable, "-m", "voiced.bench.fuzz_isolated", kind, str(n), str(workdir), "--seed", str(run_seed),
               "--skip", str(skip)]
        cmd += ["--speech", str(speech)] if speech else []
        cmd += ["--models", str(models)] if models else []
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                                env={**os.environ, **(env or {})})
        lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=_pump, args=(proc, lines), daemon=True).start()
        current = -1
        problem = ""
        while True:
            try:
                line = lines.get(timeout=watchdog_s)
            except queue.Empty:
                proc.kill()
                problem = f"no answer within {watchdog_s} s (killed)"
                break
            if line is None:  # the child's stdout closed
                code = proc.wait()
                problem = "" if summary.get("_final") else f"the interpreter died (exit status {code})"
                break
            word, _, rest = line.partition(" ")
            if word == "start":
                current = int(rest)
            elif word == "done":
                _, outcome, detail = rest.split(" ", 2)
                found = json.loads(detail)
                tally.add(Outcome(outcome), found.get("detail", ""), found.get("case", ""))
                current = -1
            elif word == "summary":
                summary = {**json.loads(rest), "_final": True}
        proc.wait()
        if not problem:
            break
        if current < 0:  # died between cases or before the first: nothing to blame, do not loop
            tally.add(Outcome.FAILURE, problem, f"{kind}: after case {skip}")
            break
        saved = ""
        if keep is not None:
            keep.mkdir(parents=True, exist_ok=True)
            target = keep / f"{kind}-{run_seed}-{current}-{FILE_KINDS[kind][0]}"
            shutil.copyfile(workdir / FILE_KINDS[kind][0], target)
            saved = f" (kept as {target})"
        tally.add(Outcome.FAILURE, problem + saved, f"{kind}: case {current}")
        skip = current + 1
        restarts += 1
        summary = {}
    return {**tally.counts, "restarts": restarts, "child_rss_mb_after_first_case": summary.get("rss_first"),
            "child_rss_mb_end": summary.get("rss_end"), "failures": tally.failures}


def _pump(proc: subprocess.Popen[str], lines: queue.Queue[str | None]) -> None:
    assert proc.stdout is not None
    for line in proc.stdout:
        lines.put(line.rstrip("\n"))
    lines.put(None)


def main(argv: list[str] | None = None) -> int:
    """The child: run the cases, report each on stdout, then a summary line."""
    from voiced.bench.fuzz_cases import fuzz_files

    parser = argparse.ArgumentParser(prog="python -m voiced.bench.fuzz_isolated")
    parser.add_argument("kind", choices=sorted(FILE_KINDS))
    parser.add_argument("count", type=int)
    parser.add_argument("workdir", type=Path)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--skip", type=int, default=0)
    parser.add_argument("--speech", type=Path)
    parser.add_argument("--models", type=Path)
    args = parser.parse_args(argv)
    rss_first: list[float] = []
    # the reports get their own copy of stdout; fd 1 and sys.stdout go to stderr, so neither the
    # loaders' prints nor a C library's writes can mix with them
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr

    # the harness's self-test: "5:crash" or "5:hang" makes case 5 kill or stall this process
    at, _, what = os.environ.get("VOICED_FUZZ_SELFTEST", "-1:").partition(":")

    def on_case(i: int, phase: str, detail: str, case: str) -> None:
        if phase == "start":
            out.write(f"start {i}\n")
            out.flush()
            if i == int(at):
                if what == "crash":
                    os.kill(os.getpid(), signal.SIGSEGV)
                signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGALRM])  # as if stuck in C code
                time.sleep(3600)
        else:
            if not rss_first:
                rss_first.append(_rss_mb())
            found = {"detail": detail[-1500:], "case": case} if phase in _FINDINGS else {}
            out.write(f"done {i} {phase} {json.dumps(found)}\n")
        out.flush()

    tally = fuzz_files(args.kind, args.count, args.workdir, args.seed, args.speech, models=args.models,
                       skip=args.skip, on_case=on_case)
    out.write("summary " + json.dumps({"counts": tally.counts, "rss_first": rss_first[0] if rss_first else None,
                                       "rss_end": _rss_mb()}) + "\n")
    out.flush()
    os._exit(0)  # no interpreter teardown: a crash there is not a case's


if __name__ == "__main__":
    raise SystemExit(main())
