"""hpc-bench: every installed operator's benchmark on this GPU, with its baselines, as a report folder.

    hpc-bench [--quick] [--ops attention,moe,router,fp8,e2e] [--out DIR] [--no-build]
    hpc-bench --from-results benchmarks/results/h200 --out DIR      # a report from recorded results, no GPU

Operators are found through the `hpc_ops.bench` entry points (hpc_common.bench.suite). On an SM90 GPU each
suite's cases run (both timing methods, ours and every baseline in one process); elsewhere each suite's
references are checked against each other on small shapes, and the report says what could not run.

DIR/report.md   summary (what ran, what was skipped and why), CPU checks, one table per operator group and method
DIR/plots/*.png latency against case / M / T with the floor, achieved bandwidth, error against precision
DIR/results/<op>.json (+ .md)  the rows in the shared results format (hpc_common.bench.results)
DIR/bench.log   the benchmarks' own output; DIR/cpu_checks.json on machines without an SM90 GPU
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import sys
import time
import traceback
from pathlib import Path

from .report_md import OpResults, ReportData, render
from .results import BenchResults, dump_results, load_results
from .suite import discover_suites, take_skipped

NO_HOPPER = ("No SM90 (Hopper) GPU here: the hpc-ops CUDA kernels cannot run on this machine; they need an H100, "
             "H200 or H20. The checks ran the pure-torch references only.")

def known_ops(suites: dict, *extra: str) -> list[str]:
    """The installed suites' operators in report order (BenchSuite.order), then `extra` ones not installed."""
    ordered = sorted(suites, key=lambda op: getattr(suites[op], "order", 100))
    return list(dict.fromkeys([*ordered, *extra]))


def aliases_of(suites: dict) -> dict[str, tuple[str, ...]]:
    """The other names `--ops` accepts (BenchSuite.aliases), each for every suite that declares it."""
    out: dict[str, tuple[str, ...]] = {}
    for op in known_ops(suites):
        for a in getattr(suites[op], "aliases", ()):
            out[a] = out.get(a, ()) + (op,)
    return out


def parse_ops(text: str | None, known: list[str], aliases: dict[str, tuple[str, ...]] | None = None) -> list[str]:
    """The operators `--ops` names (all known ones when None), in `known`'s order; SystemExit naming --ops
    on an unknown name."""
    if text is None:
        return list(known)
    aliases = aliases or {}
    want: list[str] = []
    for name in (t.strip() for t in text.split(",")):
        if not name:
            continue
        ops = aliases.get(name, (name,))
        bad = [op for op in ops if op not in known]
        if bad:
            choices = ", ".join(sorted(set(known) | {a for a, ops in aliases.items() if set(ops) <= set(known)}))
            raise SystemExit(f"hpc-bench: --ops: unknown operator {name!r} (choose from {choices})")
        want += ops
    return [op for op in known if op in want]


def _write_report(out: Path, data: ReportData, plots: bool) -> Path:
    if plots and data.ops:
        from .plots import write_plots

        data.plots, why = write_plots(data.ops, out / "plots", out)
        if why:
            data.skipped.append(("plots", why))
    path = out / "report.md"
    path.write_text(render(data))
    return path


# ---- a report from recorded results -----------------------------------------------------------------------

def from_results(args) -> int:
    folder = Path(args.from_results)
    if not folder.is_dir():
        raise SystemExit(f"hpc-bench: --from-results: {folder} is not a folder")
    suites = discover_suites()
    known = known_ops(suites, "e2e")  # every e2e* file is one section, whether or not the runner is installed
    ops = parse_ops(args.ops, known, aliases_of(suites))
    out = Path(args.out)
    (out / "results").mkdir(parents=True, exist_ok=True)
    import torch

    where = f"a machine with {torch.cuda.get_device_name()}" if torch.cuda.is_available() else "a machine without a GPU"
    data = ReportData(origin=f"Built by `hpc-bench --from-results {args.from_results}` on {where}, from recorded "
                             "results: no benchmark ran for this report; each section names the file and commit of "
                             "its rows." + (f" {args.note}" if args.note else ""),
                      machine=[])
    for path in sorted(folder.glob("*.json")):
        op = path.stem if path.stem in known else "e2e" if "e2e" in path.stem else None
        if op not in ops:
            continue
        try:
            meta, rows = load_results(path)
        except ValueError as e:
            data.skipped.append((path.name, str(e)))
            continue
        shutil.copyfile(path, out / "results" / path.name)
        source = f"results/{path.name}"
        if op in data.ops:  # several e2e files: one section
            data.ops[op].rows += rows
            data.ops[op].source += f"`, `{source}"
        else:
            suite = suites.get(op)
            data.ops[op] = OpResults(op, getattr(suite, "title", "") or op, rows, meta, source,
                                     tuple(getattr(suite, "layouts", ())))
    for op in ops:
        res = data.ops.get(op)
        if res is None:
            data.status.append((op, "no results", f"no {op}.json in {args.from_results}"))
        else:
            providers = ", ".join(dict.fromkeys(str(r.get("provider")) for r in res.rows))
            data.status.append((op, "recorded", f"{len(res.rows)} rows from `{res.source}`; providers: {providers}"))
    metas = [r.meta for r in data.ops.values()]
    gpus = sorted({str(m.get("gpu")) for m in metas if m.get("gpu")})
    data.machine = [f"GPU of the recorded rows: {', '.join(gpus) or 'unknown'}"]
    for key in ("torch", "cuda", "nvcc"):
        vals = sorted({str(m.get(key)).strip().splitlines()[-1] for m in metas if m.get(key)})
        if vals:
            data.machine.append(f"{key}: {'; '.join(vals)}")
    path = _write_report(out, data, not args.no_plots)
    print(f"wrote {path} ({len(data.ops)} operators from {folder})")
    return 0


# ---- a run on this machine ---------------------------------------------------------------------------------

def _run_cases(op: str, suite, cases, bar, log, data: ReportData) -> tuple[list[dict], bool]:
    """Every case of one suite under the progress bar; (rows, whether every case ran)."""
    import torch

    rows: list[dict] = []
    ok = True
    for case in cases:
        bar.step(f"{op}: {case.label}")
        t0 = time.time()
        try:
            with contextlib.redirect_stdout(log):
                print(f"== {op}: {case.label}", flush=True)
                got = case.run()
                if torch.cuda.is_available():
                    torch.cuda.synchronize()  # an asynchronous fault belongs to this case
            rows += got
        except Exception as e:  # one failing case must not lose the others
            ok = False
            data.skipped.append((f"{op}: {case.label}", f"failed: {type(e).__name__}: {str(e)[:300]}"))
            print(f"  {op}: {case.label} FAILED: {type(e).__name__}: {e}", file=log, flush=True)
            traceback.print_exc(file=log)  # where it failed, for the bug report
        for what, why in take_skipped():
            data.skipped.append((f"{op}: {what}", why))
        log.write(f"   ({time.time() - t0:.1f} s)\n")
        bar.advance(case.est_s)
    return rows, ok


def run_here(args) -> int:
    from .. import report
    from .progress import Progress
    from .results import _git_commit

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    machine = report.machine()
    failed = [] if args.no_build else report.build_all()
    suites = discover_suites()
    # The known operators in the report's order, then any other installed suite; e2e is listed even when not
    # installed, so the summary says so.
    ops = parse_ops(args.ops, known_ops(suites, "e2e"), aliases_of(suites))
    hopper = report._hopper()
    command = f"hpc-bench{' --quick' if args.quick else ''}{f' --ops {args.ops}' if args.ops else ''}"
    commit = _git_commit(Path(__file__).resolve().parent)
    if hopper:
        origin = f"Measured on this machine by `{command}`, commit {commit}." + (f" {args.note}" if args.note else "")
    else:
        origin = (f"Run on this machine by `{command}`, commit {commit}, without an SM90 (Hopper) GPU: no kernel and "
                  "no benchmark ran; the references were checked against each other on small shapes instead.")
        machine = machine + [NO_HOPPER]
    data = ReportData(origin=origin, machine=machine)
    if not args.no_build:
        data.notes.append(report.build_summary(failed).replace("\n", " "))
    rc = 1 if failed else 0
    plan: list[tuple[str, object, list]] = []
    checks_of: list[tuple[str, object]] = []
    for op in ops:
        suite = suites.get(op)
        if suite is None:
            data.status.append((op, "not installed", f"no `hpc_ops.bench` entry point named {op} (install the package "
                                                     "that provides it)"))
            continue
        why = suite.unavailable()
        if why is None and failed:
            why = f"kernel build failed ({', '.join(failed)}); see the build summary"
        if why is None:
            try:
                cases = suite.cases(args.quick)
            except Exception as e:  # noqa: BLE001 - a suite that cannot list its cases is reported
                why = f"could not list its cases: {type(e).__name__}: {e}"
        if why is not None:
            data.status.append((op, "GPU cases not run", why))
            checks_of.append((op, suite))
            continue
        plan.append((op, suite, cases))
    if checks_of:
        print("\n== CPU checks: the references on small shapes, against each other", flush=True)
        for op, suite in checks_of:
            try:
                rows = [dict(c, op=op) for c in suite.cpu_check()]
            except Exception as e:  # noqa: BLE001
                rows = [dict(op=op, check="cpu_check raised", max_err=float("nan"), tol=0.0, ok=False,
                             error=f"{type(e).__name__}: {e}")]
            for c in rows:
                print(f"  {op}: {c.get('check')}: max error {c.get('max_err'):.3g} (tolerance {c.get('tol'):.3g}) "
                      f"{'ok' if c.get('ok') else 'FAILED'}", flush=True)
            data.checks += rows
        rc |= 0 if all(c.get("ok") for c in data.checks) else 1
        (out / "cpu_checks.json").write_text(dump_results({"kind": "cpu_checks"}, data.checks))
        if not hopper:
            report.references()
    if plan:
        total = sum(c.est_s for _, _, cases in plan for c in cases)
        print(f"\n== benchmarks: {sum(len(c) for _, _, c in plan)} cases, about {total:.0f} s; their output goes to "
              f"{out / 'bench.log'}", flush=True)
        with open(out / "bench.log", "a") as log, Progress("benchmarks", total) as bar:
            for op, suite, cases in plan:
                res = BenchResults(op, out / "results", repo=Path(__file__).resolve().parent, **suite.meta())
                rows, ok = _run_cases(op, suite, cases, bar, log, data)
                res.rows = rows
                rc |= 0 if ok else 1
                if rows:
                    res.write()
                    data.ops[op] = OpResults(op, suite.title or op, rows, res.meta, f"results/{op}.json",
                                             tuple(getattr(suite, "layouts", ())))
                data.status.append((op, "measured" if ok else "measured, with failures",
                                    f"{len(rows)} rows, {len(cases)} cases"))
    print("\n== summary", flush=True)
    for op, status, detail in data.status:
        print(f"  {op}: {status}: {detail}")
    for what, why in data.skipped:
        print(f"  skipped {what}: {why}")
    for note in data.notes:
        print(f"  {note}")
    if not hopper:
        print(NO_HOPPER)
    path = _write_report(out, data, not args.no_plots)
    print(f"wrote {path}")
    return rc


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="hpc-bench", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="a short subset of every suite (about a minute on an H200)")
    ap.add_argument("--ops", default=None,
                    help="comma-separated operators: decode, prologue, router_gemm, fp8_quant, moe, e2e, or attention "
                         "(decode + prologue), router, fp8 (default: every installed one)")
    ap.add_argument("--out", default="hpc-bench-report", help="the report folder (default: ./hpc-bench-report)")
    ap.add_argument("--from-results", default=None, metavar="DIR",
                    help="build the report from a recorded results folder (e.g. benchmarks/results/h200); runs nothing")
    ap.add_argument("--note", default=None, help="a sentence added to the report's header")
    ap.add_argument("--no-build", action="store_true", help="do not compile the kernels first (they JIT-build on use)")
    ap.add_argument("--no-plots", action="store_true", help="tables only")
    ap.add_argument("--list", action="store_true", help="list the installed suites and whether they can run here")
    args = ap.parse_args(argv)
    if args.list:
        for op, suite in discover_suites().items():
            print(f"{op}: {suite.title} ({suite.unavailable() or 'can run here'})")
        return 0
    if args.from_results:
        return from_results(args)
    return run_here(args)


if __name__ == "__main__":
    sys.exit(main())
