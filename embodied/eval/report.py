"""The sim-to-real report: `results.json` (every episode) -> `report.md` and PNG sweep plots.

`embodied report DIR` remakes DIR/report.md (and report.html, embodied/eval/report_html.py) from
DIR/results.json without running anything.
Schema of results.json (embodied/eval/results_file.py reads, validates and writes it;
docs/sim2real.md, "results.json"):

  {"format": "embodied-sim2real-results", "version": 1,
   "protocol": {...},                         # written verbatim into the protocol block
   "conditions": {"nominal": {"kind": "nominal"}, "robot": {"kind": "robot"},
                  "friction=0.6": {"kind": "sweep", "axis": "friction", "value": 0.6}, ...},
   "episodes": [{"checkpoint": str, "condition": str, "task": str, "seed": int,
                 "success": bool, "length": int, "run": int | str (optional)}, ...]}

Statistics (embodied/eval/stats.py): Wilson 95% per (checkpoint, condition, task); the IQM over
runs and tasks with its stratified-bootstrap interval (the run is the unit); the sim-to-real
gap nominal - robot with Newcombe's interval; Pearson, Spearman and MMRV over checkpoints.
Only numpy here; matplotlib is imported for the plots, which are skipped without it.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from embodied.eval import stats
from embodied.eval.report_html import write_html
from embodied.eval.results_file import PROTOCOL_KEYS, ReportError, Results, load_results

# ---------------------------------------------------------------------------- tallies

def _ordered(values) -> list:
    return list(dict.fromkeys(values))


@dataclass
class Tally:
    """Success counts: k[(checkpoint, condition, task)], n[...] and per-run counts."""
    checkpoints: list[str]
    tasks: list[str]
    k: dict
    n: dict
    runs: dict  # (checkpoint, condition, task) -> {run: [k, n]}
    runs_given: bool


def tally(results: Results) -> Tally:
    k, n = defaultdict(int), defaultdict(int)
    runs: dict = defaultdict(lambda: defaultdict(lambda: [0, 0]))
    for i, ep in enumerate(results.episodes):
        key = (ep["checkpoint"], ep["condition"], ep["task"])
        k[key] += ep["success"]
        n[key] += 1
        r = runs[key][ep.get("run", f"episode {i}")]
        r[0] += ep["success"]
        r[1] += 1
    eps = results.episodes
    return Tally(_ordered(e["checkpoint"] for e in eps), _ordered(e["task"] for e in eps), k, n, runs,
                 runs_given=all("run" in e for e in eps))


def _fmt(p: float, low: float, high: float) -> str:
    return f"{p:.2f} [{low:.2f}, {high:.2f}]"


def _table(header: list[str], rows: list[list]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return out + ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]


# ---------------------------------------------------------------------------- sections

def per_condition(t: Tally, conditions: dict) -> list[str]:
    rows = []
    for ck in t.checkpoints:
        for cond in conditions:
            for task in t.tasks:
                n = t.n.get((ck, cond, task), 0)
                if n:
                    k = t.k[(ck, cond, task)]
                    rows.append([ck, cond, task, n, k, _fmt(k / n, *stats.wilson_interval(k, n))])
    return ["## Success per condition", "",
            "Success rate with its Wilson 95% score interval; n episodes, k successes.", "",
            *_table(["checkpoint", "condition", "task", "n", "k", "success [Wilson 95%]"], rows)]


def across_tasks(t: Tally, conditions: dict, reps: int, seed: int) -> list[str]:
    rows, notes = [], []
    for ck in t.checkpoints:
        for cond in conditions:
            per_task = [sorted(t.runs[(ck, cond, task)].items(), key=lambda kv: str(kv[0]))
                        for task in t.tasks if (ck, cond, task) in t.runs]
            counts = [len(p) for p in per_task]
            if not counts:
                continue
            if len(set(counts)) > 1:
                notes.append(f"- {ck} / {cond}: not computed, the tasks have different numbers of runs {counts}.")
                continue
            scores = np.array([[kn[0] / kn[1] for _, kn in p] for p in per_task]).T  # [runs, tasks]
            if scores.shape[0] < MIN_IQM_RUNS:
                rows.append([ck, cond, scores.shape[0], scores.shape[1],
                             f"not computed: {scores.shape[0]} run(s), the interval needs >= {MIN_IQM_RUNS}"])
                continue
            point, low, high = stats.stratified_bootstrap_ci(scores, "iqm", reps=reps, seed=seed)
            rows.append([ck, cond, scores.shape[0], scores.shape[1], _fmt(point, low, high)])
    unit = ("the run (the episodes' `run` field)" if t.runs_given else
            "the episode: results.json gives no `run` field, so this is an episode-level interval, "
            "narrower than the run-level one it stands in for")
    return ["## Across tasks: IQM", "",
            f"Interquartile mean of the runs' success rates over runs x tasks, with its 95% stratified-"
            f"bootstrap interval ({reps} resamples, seed {seed}; runs resampled within each task). "
            f"The unit is {unit}. With fewer than {MIN_IQM_RUNS} runs a bootstrap resample repeats the same "
            "few values and its interval comes out narrower than the Wilson interval of the same episodes, so none "
            "is given (more trials give more runs).", "",
            *_table(["checkpoint", "condition", "runs", "tasks", "IQM [95% CI]"], rows), *notes]


def sweeps(t: Tally, conditions: dict) -> tuple[list[str], dict[str, list]]:
    """The sweep tables and, per axis, the plotted series [(task, checkpoint, values [V], success [V],
    low [V], high [V])]."""
    axes = _ordered(c["axis"] for c in conditions.values() if c["kind"] == "sweep")
    if not axes:
        return ["## Sweeps", "", "No sweep conditions in results.json."], {}
    nominal = next((n for n, c in conditions.items() if c["kind"] == "nominal"), None)
    lines, series = ["## Sweeps", "", "Success [Wilson 95%] (n) against each swept axis."], {}
    for axis in axes:
        conds = sorted((c["value"], name) for name, c in conditions.items()
                       if c["kind"] == "sweep" and c["axis"] == axis)
        rows, series[axis] = [], []
        for task in t.tasks:
            for label, cond in ([("nominal", nominal)] if nominal else []) + [(f"{v:g}", c) for v, c in conds]:
                cells = []
                for ck in t.checkpoints:
                    n = t.n.get((ck, cond, task), 0)
                    k = t.k.get((ck, cond, task), 0)
                    cells.append(f"{_fmt(k / n, *stats.wilson_interval(k, n))} ({n})" if n else "-")
                rows.append([task, label, *cells])
            for ck in t.checkpoints:
                pts = [(v, t.k[(ck, c, task)], t.n[(ck, c, task)]) for v, c in conds if t.n.get((ck, c, task))]
                if pts:
                    v, k, n = (np.array(x, dtype=float) for x in zip(*pts))
                    low, high = stats.wilson_interval(k, n)
                    series[axis].append((task, ck, v, k / n, np.asarray(low), np.asarray(high)))
        image = [f"![success against {axis}]({_png(axis)})", ""] if series[axis] else []
        lines += ["", f"### {axis}", "", *image,
                  *_table(["task", axis, *t.checkpoints], rows)]
    return lines, series


def _png(axis: str) -> str:
    return "sweep_" + re.sub(r"[^A-Za-z0-9_.-]", "_", axis) + ".png"


def plot_sweeps(series: dict[str, list], out: Path) -> str | None:
    """sweep_<axis>.png per axis; None, or why the plots were skipped."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed (pip install 'embodied-rl[vla]'): the sweep plots were skipped."
    for axis, lines in series.items():
        if not lines:
            continue
        tasks = _ordered(line[0] for line in lines)
        colours = {ck: f"C{i % 10}" for i, ck in enumerate(_ordered(line[1] for line in lines))}
        fig, axs = plt.subplots(1, len(tasks), figsize=(1.5 + 3.5 * len(tasks), 3.2), dpi=100,
                                sharey=True, squeeze=False)
        for task, ck, v, p, low, high in lines:
            ax = axs[0, tasks.index(task)]
            ax.errorbar(v, p, yerr=[p - low, high - p], marker="o", capsize=3, color=colours[ck], label=ck)
        for ax, task in zip(axs[0], tasks):
            ax.set(xlabel=axis, title=task, ylim=(-0.02, 1.02))
        axs[0, 0].set_ylabel("success rate (Wilson 95%)")
        handles, labels = axs[0, 0].get_legend_handles_labels()
        fig.legend(handles, labels, loc="center right", fontsize=7)
        fig.tight_layout(rect=(0, 0, 1 - 1.2 / (1.5 + 3.5 * len(tasks)), 1))
        fig.savefig(out / _png(axis))
        plt.close(fig)
    return None


MIN_IQM_RUNS = 5  # runs per task below which the IQM's bootstrap interval is not reported


def verdict(t: Tally, conditions: dict) -> list[str]:
    """One line per checkpoint and task: nominal success [Wilson 95%], the gap to the robot
    [Newcombe 95%] where there is a robot, and the worst swept condition."""
    nominal, robot, swept = _kind(conditions, "nominal"), _kind(conditions, "robot"), _kind(conditions, "sweep")
    lines = []
    for ck in t.checkpoints:
        for task in t.tasks:
            parts = []
            for cond in nominal[:1]:
                k, n = t.k.get((ck, cond, task), 0), t.n.get((ck, cond, task), 0)
                if n:
                    low, high = stats.wilson_interval(k, n)
                    parts.append(f"simulation {k}/{n} = {k / n:.2f} [{low:.2f}, {high:.2f}]")
            for cond in robot[:1]:
                ks, ns = t.k.get((ck, nominal[0], task), 0) if nominal else 0, t.n.get((ck, nominal[0], task), 0) if nominal else 0
                kr, nr = t.k.get((ck, cond, task), 0), t.n.get((ck, cond, task), 0)
                if nr:
                    parts.append(f"{cond} {kr}/{nr} = {kr / nr:.2f}")
                if ns and nr:
                    d, low, high = stats.newcombe_difference(ks, ns, kr, nr)
                    parts.append(f"gap {d:+.2f} [{low:+.2f}, {high:+.2f}] "
                                 f"({'a gap' if low > 0 else 'no gap shown' if low <= 0 <= high else 'robot better'})")
            rates = [(t.k[(ck, c, task)] / t.n[(ck, c, task)], c) for c in swept if t.n.get((ck, c, task))]
            if rates:
                rate, cond = min(rates)
                parts.append(f"worst sweep {cond} {rate:.2f}")
            if parts:
                lines.append(f"{ck} on {task}: " + "; ".join(parts))
    return lines


def _kind(conditions: dict, kind: str) -> list[str]:
    return [n for n, c in conditions.items() if c["kind"] == kind]


def sim_to_real(t: Tally, conditions: dict) -> list[str]:
    nominal, robot = _kind(conditions, "nominal"), _kind(conditions, "robot")
    head = ["## Sim-to-real gap", ""]
    if not nominal or not robot:
        return head + ["Needs a `nominal` and a `robot` condition; results.json has "
                       f"{'no nominal' if not nominal else 'no robot'} condition."]
    rows = []
    for ck in t.checkpoints:
        for task in t.tasks:
            ks, ns = t.k.get((ck, nominal[0], task), 0), t.n.get((ck, nominal[0], task), 0)
            kr, nr = t.k.get((ck, robot[0], task), 0), t.n.get((ck, robot[0], task), 0)
            if ns and nr:
                d, low, high = stats.newcombe_difference(ks, ns, kr, nr)
                rows.append([ck, task, f"{ks}/{ns} = {ks / ns:.2f}", f"{kr}/{nr} = {kr / nr:.2f}",
                             f"{d:+.2f} [{low:+.2f}, {high:+.2f}]"])
    return head + ["Gap = nominal-simulation success - robot success, with Newcombe's hybrid score "
                   "95% interval for a difference of two independent proportions (Newcombe 1998, "
                   "method 10). Where the robot's trials repeat the simulation's seeded initial "
                   "conditions the samples are paired, and this interval is conservative (wider).", "",
                   *_table(["checkpoint", "task", "sim (nominal)", "robot", "gap [95% CI]"], rows)]


def paired_counts(results: Results) -> list[tuple[str, str, str, str, tuple[int, int, int, int]]]:
    """For every checkpoint after the first, against the first, per condition and task, on the
    seeds both ran: (condition, task, first, other, (a, b, c, d)) with a: both succeed, b: only
    the first, c: only the other, d: neither."""
    by_seed: dict = defaultdict(dict)  # (condition, task, checkpoint) -> {seed: success}
    for ep in results.episodes:
        by_seed[(ep["condition"], ep["task"], ep["checkpoint"])][ep["seed"]] = bool(ep["success"])
    cks = _ordered(e["checkpoint"] for e in results.episodes)
    out = []
    for cond in _ordered(e["condition"] for e in results.episodes):
        for task in _ordered(e["task"] for e in results.episodes):
            first = by_seed.get((cond, task, cks[0]), {})
            for ck in cks[1:]:
                other = by_seed.get((cond, task, ck), {})
                seeds = sorted(set(first) & set(other))
                if seeds:
                    x, y = np.array([first[s] for s in seeds]), np.array([other[s] for s in seeds])
                    out.append((cond, task, cks[0], ck, (int(np.sum(x & y)), int(np.sum(x & ~y)),
                                                         int(np.sum(~x & y)), int(np.sum(~x & ~y)))))
    return out


def paired_lines(results: Results) -> list[str]:
    """One line per pair: the other checkpoint's success minus the first's on the same seeds,
    with its 95% interval for paired proportions."""
    lines = []
    for cond, task, first, ck, (a, b, c, d) in paired_counts(results):
        diff, low, high = stats.newcombe_paired_difference(a, b, c, d)
        shown = "better" if low > 0 else "worse" if high < 0 else "no difference shown"
        lines.append(f"{ck} - {first} on {task} ({cond}, {a + b + c + d} paired seeds): {diff:+.2f} "
                     f"[{low:+.2f}, {high:+.2f}] ({shown}; {c} seeds only {ck} solved, {b} only {first})")
    return lines


def paired(results: Results) -> list[str]:
    head = ["## Between checkpoints: paired difference on the same seeds", ""]
    rows = []
    for cond, task, first, ck, (a, b, c, d) in paired_counts(results):
        diff, low, high = stats.newcombe_paired_difference(a, b, c, d)
        rows.append([ck, first, cond, task, a + b + c + d, c, b, f"{diff:+.2f} [{low:+.2f}, {high:+.2f}]"])
    if not rows:
        return head + ["Needs at least 2 checkpoints run on the same seeds."]
    return head + ["Each checkpoint against the first, on the seeds both ran (the same initial conditions): the "
                   "difference of success rates with Newcombe's score 95% interval for paired proportions "
                   "(Newcombe 1998, method 10). Pairing removes the seeds' own difficulty from the comparison, so "
                   "this interval is narrower than one from the two rates' separate intervals.", "",
                   *_table(["checkpoint", "against", "condition", "task", "pairs", "only it solved",
                            "only the other solved", "difference [95% CI]"], rows)]


def agreement(t: Tally, conditions: dict) -> list[str]:
    robot = _kind(conditions, "robot")
    head = ["## Across checkpoints: does simulation predict the robot?", ""]
    if not robot or len(t.checkpoints) < 2:
        return head + ["Needs a `robot` condition and at least 2 checkpoints; results.json has "
                       f"{len(robot)} robot condition(s) and {len(t.checkpoints)} checkpoint(s)."]
    sims = [(c if c == kind else f"{kind} ({c})", [c]) for kind in ("nominal", "randomised")
            for c in _kind(conditions, kind)]
    swept = _kind(conditions, "sweep")
    if swept:
        sims.append((f"mean over the {len(swept)} sweep conditions", swept))
    rows = []
    for task in t.tasks:
        real = [t.k.get((ck, robot[0], task), 0) / max(t.n.get((ck, robot[0], task), 0), 1) for ck in t.checkpoints]
        for label, conds in sims:
            rates = [[t.k[(ck, c, task)] / t.n[(ck, c, task)] for c in conds if t.n.get((ck, c, task))]
                     for ck in t.checkpoints]
            have = [i for i, r in enumerate(rates) if r and t.n.get((t.checkpoints[i], robot[0], task))]
            if len(have) < 2:
                continue
            s, r = [float(np.mean(rates[i])) for i in have], [real[i] for i in have]
            cell = (lambda v: "undefined (constant)" if np.isnan(v) else f"{v:+.2f}")
            rows.append([task, label, len(have), cell(stats.pearson(s, r)), cell(stats.spearman(s, r)),
                         f"{stats.mmrv(s, r):.3f}"])
    return head + ["Per task, over checkpoints: Pearson r and Spearman rho between simulated and robot "
                   "success, and SimplerEnv's mean maximum rank violation (MMRV: 0 when simulation ranks "
                   "the checkpoints as the robot does; each checkpoint's worst mis-ranking, in robot "
                   "success, averaged).", "",
                   *_table(["task", "simulation", "checkpoints", "Pearson r", "Spearman rho", "MMRV"], rows)]


def protocol_block(results: Results, t: Tally, digest: str) -> list[str]:
    block = {"protocol": results.protocol, "checkpoints": t.checkpoints, "tasks": t.tasks,
             "conditions": results.conditions, "episodes": len(results.episodes),
             "episodes_per_condition": sorted(set(t.n.values())), "results_sha256": digest}
    missing = [k for k in PROTOCOL_KEYS if k not in results.protocol]
    note = [f"The protocol does not state: {', '.join(missing)}."] if missing else []
    return ["## Protocol", "", "```json", _json_block(block), "```", *note]


def _json_block(block: dict) -> str:
    """JSON with one line per top-level key and per key of a nested object (readable, parseable)."""
    def one(v):
        return json.dumps(v, separators=(", ", ": "))

    items = []
    for key, v in block.items():
        if isinstance(v, dict) and v:
            inner = ",\n".join(f"  {one(k)}: {one(x)}" for k, x in v.items())
            items.append(f" {one(key)}: {{\n{inner}\n }}")
        else:
            items.append(f" {one(key)}: {one(v)}")
    return "{\n" + ",\n".join(items) + "\n}"


# ---------------------------------------------------------------------------- the report

def write_report(folder: str | Path, reps: int = 2000, seed: int = 0) -> Path:
    """Remake folder/report.md, report.html and sweep_<axis>.png from folder/results.json."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ReportError(f"DIR: expected a report folder holding results.json, {folder} is not a directory")
    raw = (folder / "results.json").read_bytes() if (folder / "results.json").is_file() else b""
    results = load_results(folder / "results.json")
    t = tally(results)
    sweep_lines, series = sweeps(t, results.conditions)
    lines = ["# Sim-to-real report", "",
             "## Verdict", "", *[f"- {v}" for v in verdict(t, results.conditions)], "",
             f"From results.json ({len(results.episodes)} episodes; every episode and the protocol, raw); remade by "
             "`embodied report DIR`; how to read it: docs/sim2real.md. Intervals are 95%: Wilson for a success "
             "rate, Newcombe for a gap.", "",
             *sweep_lines, "",
             *sim_to_real(t, results.conditions), "",
             *paired(results), "",
             *per_condition(t, results.conditions), "",
             *across_tasks(t, results.conditions, reps, seed), "",
             *agreement(t, results.conditions), "",
             *protocol_block(results, t, hashlib.sha256(raw).hexdigest()), ""]
    skipped = plot_sweeps(series, folder)  # written once every number is computed: bad input loses nothing
    if skipped:
        lines.insert(lines.index("## Sim-to-real gap") - 1, skipped)
    videos = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*.mp4"))
    if videos:
        lines += ["## Videos", "", *[f"- [{v}]({v})" for v in videos], ""]
    path = folder / "report.md"
    path.write_text("\n".join(lines))
    write_html(folder, "\n".join(lines))  # report.html: the same page in a browser, PNGs and videos inline
    return path


def cmd_report(args) -> int:
    path = write_report(args.dir, reps=args.reps, seed=args.seed)
    print(f"wrote {path}")
    return 0
