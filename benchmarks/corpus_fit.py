"""The corpus generator's fit (workload/corpus_fit.py) and its distances on held-out traces.

Fit set: the 100 Claude Code sessions of tests/data/traces/claude-code and the 6 sessions with
subagents of tests/data/traces/claude-code-subagents (callanjfox/kv-cache-tester, traces/, the
subagent sessions whose BLAKE2b(id) first byte is even). Held-out set: every other trace of
that repository (a directory of trace_*.json; git-LFS pointers and sessions of the fit set
are skipped). Per distribution, the two-sample Kolmogorov-Smirnov D of held-out vs generated
and, for scale, of held-out vs the fit set itself (what a perfect model of the fit set could
reach), and the median / p90 relative errors; then whole-session quantities.

    PYTHONPATH=src python benchmarks/corpus_fit.py --write            # refit, write the data
    PYTHONPATH=src python benchmarks/corpus_fit.py --held-out DIR [--out FILE.json] [--markdown]
"""

from __future__ import annotations

import argparse
import json
import subprocess
from pathlib import Path

from kvbench.files import write_json_atomic
from kvbench.workload import load_trace
from kvbench.workload.corpus import PARAMS, CorpusSpec, generate_corpus, load_params
from kvbench.workload.corpus_fit import distances, fit, samples, session_shape

ROOT = Path(__file__).resolve().parents[1]
FIT_SET = [ROOT / "tests/data/traces/claude-code", ROOT / "tests/data/traces/claude-code-subagents"]
SOURCE = {
    "traces": "callanjfox/kv-cache-tester traces/ (Apache-2.0): the 100 sessions of "
              "tests/data/traces/claude-code and the 6 of tests/data/traces/claude-code-subagents",
    "fit": "benchmarks/corpus_fit.py --write (kvbench.workload.corpus_fit.fit)",
}


def _commit() -> str:
    try:
        return subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def write_params() -> dict:
    sessions = load_trace(FIT_SET, split_chains=False)  # as recorded (weka.parse_session)
    doc = {"source": {**SOURCE, "sessions": str(len(sessions))}, "block_tokens": 64,
           **fit(sessions)}
    write_json_atomic(PARAMS, doc)
    load_params.cache_clear()
    return doc


def _held_out(directory: Path, fit_ids: set[str]) -> list:
    files = []
    for path in sorted(directory.glob("trace_*.json*")):
        head = path.read_bytes()[:64]
        if head.startswith(b"version https://git-lfs"):
            continue
        if path.name.split(".")[0] in fit_ids:
            continue
        files.append(path)
    return load_trace(files, split_chains=False)


def report(held_dir: Path, generated_sessions: int, seed: int) -> dict:
    fit_sessions = load_trace(FIT_SET, split_chains=False)
    held = _held_out(held_dir, {s.session_id for s in fit_sessions})
    # the fitted traces are kv-cache-tester's full-context sessions: compare unfiltered
    corpus = generate_corpus(CorpusSpec(sessions=generated_sessions, seed=seed,
                                        context_tokens=10**9))
    ref, _ = samples(held)
    gen, gen_scalars = samples(corpus)
    base, base_scalars = samples(fit_sessions)
    _, held_scalars = samples(held)
    return {
        "fit_sessions": len(fit_sessions), "held_out_sessions": len(held),
        "generated_sessions": len(corpus), "seed": seed,
        "distributions": {"generated": distances(ref, gen), "fit_set": distances(ref, base)},
        "scalars": {"held_out": held_scalars, "generated": gen_scalars, "fit_set": base_scalars},
        "sessions": {"generated": distances(session_shape(held), session_shape(corpus)),
                     "fit_set": distances(session_shape(held), session_shape(fit_sessions))},
    }


def markdown(doc: dict) -> str:
    lines = [f"fit {doc['fit_sessions']} sessions, held-out {doc['held_out_sessions']}, "
             f"generated {doc['generated_sessions']} (seed {doc['seed']})", "",
             "| distribution | n held-out / generated | KS D generated | KS D fit set | "
             "p50 held-out -> generated | p90 held-out -> generated |",
             "|---|---|---:|---:|---|---|"]
    for group in ("distributions", "sessions"):
        gen, base = doc[group]["generated"], doc[group]["fit_set"]
        for name, row in gen.items():
            if row["ks"] is None:
                lines.append(f"| {name} | {row['n'][0]} / {row['n'][1]} | - | - | - | - |")
                continue

            def cell(label: str, row=row) -> str:
                want, have = row[label]
                rel = row[f"{label}_rel"]
                return f"{want:,.4g} -> {have:,.4g} ({rel:+.0%})" if rel is not None else "-"

            lines.append(f"| {name} | {row['n'][0]:,} / {row['n'][1]:,} | {row['ks']:.3f} | "
                         f"{base[name]['ks']:.3f} | {cell('p50')} | {cell('p90')} |")
    s = doc["scalars"]
    lines += ["", "| rate | held-out | generated | fit set |", "|---|---:|---:|---:|"]
    lines += [f"| {k} | {s['held_out'][k]:.4f} | {s['generated'][k]:.4f} | "
              f"{s['fit_set'][k]:.4f} |" for k in s["held_out"]]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--write", action="store_true", help="refit and write the parameters")
    ap.add_argument("--held-out", type=Path, help="kv-cache-tester traces/ directory")
    ap.add_argument("--sessions", type=int, default=2000, help="generated sessions")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args()
    if args.write:
        doc = write_params()
        print(f"wrote {PARAMS} ({doc['source']['sessions']} sessions, commit {_commit()})")
    if args.held_out:
        doc = report(args.held_out, args.sessions, args.seed)
        if args.out:
            write_json_atomic(args.out, doc)
        print(markdown(doc) if args.markdown else json.dumps(doc, indent=1))


if __name__ == "__main__":
    main()
