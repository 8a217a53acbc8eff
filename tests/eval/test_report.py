"""embodied/eval/report.py and `embodied report DIR`: a synthetic results.json of 5 checkpoints x 10
conditions x 2 tasks x 100 trials (known success rates) is rendered, and the report's numbers
are checked against counts taken straight from the episodes."""

from __future__ import annotations

import json
import re
import sys

import numpy as np
import pytest

from embodied.eval import stats
from embodied.cli import main
from embodied.eval.report import write_report
from embodied.eval.results_file import ReportError, load_results, validate, write_results

CHECKPOINTS = [f"ckpt_{i}" for i in range(5)]
QUALITY = [0.2, 0.4, 0.55, 0.7, 0.85]  # nominal success rate of each checkpoint
TASKS = ["PushCube", "PickCube"]
CONDITIONS = {"nominal": {"kind": "nominal"}, "randomised": {"kind": "randomised"}, "robot": {"kind": "robot"}}
SHIFT = {"nominal": 0.0, "randomised": -0.05, "robot": -0.15}  # success shift of each condition
for axis, values in {"friction": [0.5, 1.5], "mass": [0.5, 2.0], "latency_steps": [1, 2, 3]}.items():
    for v in values:
        CONDITIONS[f"{axis}={v}"] = {"kind": "sweep", "axis": axis, "value": v}
        SHIFT[f"{axis}={v}"] = -0.1 * abs(v - 1.0)
PROTOCOL = {"seeds": "0..99 per condition", "trials_per_condition": 100, "chunk_size": 8,
            "executed_steps": 4, "control_hz": 20, "success": "cube within 2 cm of the goal",
            "toolkit_version": "0.1.0", "simulator_versions": {"mujoco": "4.0.0"}, "config_hash": "abc123"}


def synthetic_episodes(trials: int = 100, runs: bool = True, seed: int = 0) -> list[dict]:
    """[5 checkpoints x 10 conditions x 2 tasks x trials] episode records; run = seed // 20."""
    rng = np.random.default_rng(seed)
    eps = []
    for ck, q in zip(CHECKPOINTS, QUALITY):
        for cond in CONDITIONS:
            for t, task in enumerate(TASKS):
                p = float(np.clip(q + SHIFT[cond] - 0.05 * t, 0.0, 1.0))
                success = rng.random(trials) < p
                for s in range(trials):
                    ep = {"checkpoint": ck, "condition": cond, "task": task, "seed": s,
                          "success": bool(success[s]), "length": int(rng.integers(20, 100))}
                    if runs:
                        ep["run"] = s // 20
                    eps.append(ep)
    return eps


@pytest.fixture(scope="module")
def report_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("sim2real")
    write_results(d / "results.json", PROTOCOL, CONDITIONS, synthetic_episodes())
    write_report(d, reps=1000)
    return d


def _table_rows(text: str) -> list[list[str]]:
    """The cells of the first markdown table in text, header and separator left out."""
    lines = text.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith("|"))
    end = next((i for i in range(start, len(lines)) if not lines[i].startswith("|")), len(lines))
    return [[c.strip() for c in ln.strip("|").split("|")] for ln in lines[start + 2:end]]


def _rows(md: str, section: str) -> list[list[str]]:
    """The table rows (cells) of the section starting at `## {section}`."""
    return _table_rows(md.split(f"## {section}", 1)[1])


def test_report_numbers(report_dir):
    md = (report_dir / "report.md").read_text()
    eps = load_results(report_dir / "results.json").episodes

    # protocol block: machine-readable, carries the protocol and the counts
    block = json.loads(re.search(r"```json\n(.*?)\n```", md, re.S).group(1))
    assert block["protocol"] == PROTOCOL and block["episodes"] == 5 * 10 * 2 * 100
    assert block["checkpoints"] == CHECKPOINTS and block["episodes_per_condition"] == [100]
    assert "does not state" not in md

    # per condition: every (checkpoint, condition, task), counts taken from the episodes
    rows = _rows(md, "Success per condition")
    assert len(rows) == 5 * 10 * 2
    for ck, cond, task, n, k, cell in rows[::17]:
        mine = [e["success"] for e in eps if (e["checkpoint"], e["condition"], e["task"]) == (ck, cond, task)]
        assert (int(n), int(k)) == (len(mine), sum(mine))
        low, high = stats.wilson_interval(sum(mine), len(mine))
        assert cell == f"{sum(mine) / len(mine):.2f} [{low:.2f}, {high:.2f}]"

    # across tasks: 5 runs (seed // 20) x 2 tasks; the IQM of the run success rates
    rows = _rows(md, "Across tasks: IQM")
    assert len(rows) == 5 * 10 and all(r[2:4] == ["5", "2"] for r in rows)
    ck, cond = rows[0][:2]
    scores = np.array([[np.mean([e["success"] for e in eps if (e["checkpoint"], e["condition"], e["task"]) == (ck, cond, task)
                                 and e["run"] == r]) for task in TASKS] for r in range(5)])
    point, low, high = stats.stratified_bootstrap_ci(scores, "iqm", reps=1000, seed=0)
    assert rows[0][4] == f"{point:.2f} [{low:.2f}, {high:.2f}]"
    assert "The unit is the run" in md

    # sweeps: one table and one PNG per axis
    for axis in ("friction", "mass", "latency_steps"):
        assert f"### {axis}" in md
        assert (report_dir / f"sweep_{axis}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    rows = _table_rows(md.split("### latency_steps", 1)[1])  # task, value, one cell per checkpoint
    assert [r[1] for r in rows] == ["nominal", "1", "2", "3"] * 2
    for task, value, *cells in rows:
        cond = "nominal" if value == "nominal" else f"latency_steps={value}"
        for ck, cell in zip(CHECKPOINTS, cells):
            mine = [e["success"] for e in eps if (e["checkpoint"], e["condition"], e["task"]) == (ck, cond, task)]
            assert cell.startswith(f"{np.mean(mine):.2f} [") and cell.endswith("(100)")

    # sim-to-real gap: nominal - robot with Newcombe's interval; the true gap is +0.15
    rows = _rows(md, "Sim-to-real gap")
    assert len(rows) == 5 * 2
    covered = 0
    for ck, task, sim, robot, gap in rows:
        ks, ns = map(int, sim.split(" = ")[0].split("/"))
        kr, nr = map(int, robot.split(" = ")[0].split("/"))
        d, lo, hi = stats.newcombe_difference(ks, ns, kr, nr)
        assert gap == f"{d:+.2f} [{lo:+.2f}, {hi:+.2f}]"
        covered += lo <= 0.15 <= hi
    assert covered >= 8  # 95% intervals over 10 cells

    # agreement: sim and robot rank the 5 checkpoints alike (quality spacing >> noise)
    rows = _rows(md, "Across checkpoints")
    nominal = [r for r in rows if r[1].startswith("nominal")]
    assert len(nominal) == 2 and {r[1].split(" (")[0] for r in rows} >= {"nominal", "randomised", "mean over the 7 sweep conditions"}
    for task, _, n, r, rho, m in nominal:
        rate = lambda cond, ck: np.mean([e["success"] for e in eps if (e["checkpoint"], e["condition"], e["task"]) == (ck, cond, task)])  # noqa: E731
        s = [rate("nominal", ck) for ck in CHECKPOINTS]
        real = [rate("robot", ck) for ck in CHECKPOINTS]
        assert (int(n), r, m) == (5, f"{np.corrcoef(s, real)[0, 1]:+.2f}", f"{stats.mmrv(s, real):.3f}")
        assert float(r) > 0.9 and float(m) < 0.1


def test_report_is_reproducible(report_dir):
    first = (report_dir / "report.md").read_text()
    write_report(report_dir, reps=1000)
    assert (report_dir / "report.md").read_text() == first


def test_cli_report(tmp_path, capsys):
    eps = [e for e in synthetic_episodes(trials=10, runs=False) if e["checkpoint"] in CHECKPOINTS[:2]]
    write_results(tmp_path / "results.json", {"seeds": [0]}, CONDITIONS, eps)
    assert main(["report", str(tmp_path), "--reps", "200"]) == 0
    md = (tmp_path / "report.md").read_text()
    assert "episode-level interval" in md  # no run field: the report says what its unit is
    assert "The protocol does not state: trials_per_condition" in md
    # bad input: one line naming the field, exit status 2, nothing written over
    (tmp_path / "results.json").write_text(json.dumps({"format": "embodied-sim2real-results", "version": 1,
                                                       "protocol": {}, "conditions": CONDITIONS,
                                                       "episodes": [{**eps[0], "success": "yes"}]}))
    capsys.readouterr()
    assert main(["report", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "embodied report: error: episodes[0].success: expected true or false, got 'yes'"
    assert (tmp_path / "report.md").read_text() == md
    assert main(["report", str(tmp_path / "missing")]) == 2
    assert "DIR: expected a report folder" in capsys.readouterr().err


def test_report_minimal(tmp_path):
    """One checkpoint, nominal only: the sections that need more say what they need."""
    eps = [e for e in synthetic_episodes(trials=10) if e["checkpoint"] == "ckpt_0" and e["condition"] == "nominal"]
    conditions = {"nominal": {"kind": "nominal"}, "mass=2.0": {"kind": "sweep", "axis": "mass", "value": 2.0}}
    write_results(tmp_path / "results.json", PROTOCOL, conditions, eps)
    md = write_report(tmp_path, reps=100).read_text()
    assert len(_rows(md, "Success per condition")) == 2
    assert "### mass" in md and "sweep_mass.png" not in md and not (tmp_path / "sweep_mass.png").exists()
    assert "Needs a `nominal` and a `robot` condition; results.json has no robot condition." in md
    assert "results.json has 0 robot condition(s) and 1 checkpoint(s)" in md


def test_report_without_matplotlib(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` raises ImportError
    eps = [e for e in synthetic_episodes(trials=10) if e["checkpoint"] == "ckpt_0"]
    write_results(tmp_path / "results.json", PROTOCOL, CONDITIONS, eps)
    md = write_report(tmp_path, reps=100).read_text()
    assert "matplotlib is not installed" in md.split("## Sim-to-real gap")[0].split("## Sweeps")[1]
    assert not list(tmp_path.glob("*.png"))


GOOD = {"format": "embodied-sim2real-results", "version": 1, "protocol": {},
        "conditions": {"nominal": {"kind": "nominal"}},
        "episodes": [{"checkpoint": "a", "condition": "nominal", "task": "T", "seed": 0, "success": True, "length": 5}]}


@pytest.mark.parametrize("change, field", [
    (lambda d: d.update(format="other"), "format"),
    (lambda d: d.update(version=2), "version"),
    (lambda d: d.update(protocol=[]), "protocol"),
    (lambda d: d.update(conditions={}), "conditions"),
    (lambda d: d["conditions"].update(x={"kind": "real"}), "conditions.x.kind"),
    (lambda d: d["conditions"].update(x={"kind": "sweep", "value": 1}), "conditions.x.axis"),
    (lambda d: d["conditions"].update(x={"kind": "sweep", "axis": "mass", "value": "big"}), "conditions.x.value"),
    (lambda d: d["conditions"].update(x={"kind": "nominal"}), "conditions"),
    (lambda d: d.update(episodes=[]), "episodes"),
    (lambda d: d["episodes"][0].update(condition="robot"), "episodes[0].condition"),
    (lambda d: d["episodes"][0].update(seed=1.5), "episodes[0].seed"),
    (lambda d: d["episodes"][0].update(length=-1), "episodes[0].length"),
    (lambda d: d["episodes"][0].pop("task"), "episodes[0].task"),
    (lambda d: d["episodes"][0].update(run=[1]), "episodes[0].run"),
    (lambda d: d["episodes"].append({**d["episodes"][0], "run": 1}), "episodes[0].run"),
])
def test_bad_results(change, field):
    data = json.loads(json.dumps(GOOD))
    validate(data)  # the unchanged record is fine
    change(data)
    with pytest.raises(ReportError) as e:
        validate(data)
    assert str(e.value).startswith(f"{field}:") and "expected" in str(e.value) and "\n" not in str(e.value)


def test_html_page_mirrors_the_markdown(report_dir, tmp_path):
    """report.html: every markdown table with its rows, the PNGs and videos inline, text escaped,
    tags balanced (checked with the standard library's HTML parser)."""
    from html.parser import HTMLParser

    import numpy as np

    from embodied.eval.video import write_mp4

    class Page(HTMLParser):
        def __init__(self):
            super().__init__()
            self.open, self.count, self.src, self.text = [], {}, [], []

        def handle_starttag(self, tag, attrs):
            self.count[tag] = self.count.get(tag, 0) + 1
            self.src += [v for k, v in attrs if k == "src"]
            if tag not in ("img", "meta"):
                self.open.append(tag)

        def handle_endtag(self, tag):
            assert self.open.pop() == tag

        def handle_data(self, data):
            self.text.append(data)

    md = (report_dir / "report.md").read_text()
    page = Page()
    page.feed((report_dir / "report.html").read_text())
    assert page.open == []
    rows = [ln for ln in md.splitlines() if ln.startswith("|")]
    separators = [ln for ln in rows if ln.startswith("|---")]  # one per table
    assert page.count["tr"] == len(rows) - len(separators) and page.count["table"] == len(separators)
    pngs = sorted(p.name for p in report_dir.glob("sweep_*.png"))
    assert pngs and sorted(page.src) == pngs
    assert page.count["h2"] == md.count("\n## ") and '"config_hash"' in "".join(page.text)
    # A name that is HTML stays text; a video in the folder plays on the page.
    eps = [{**e, "checkpoint": "a<b>&c"} for e in synthetic_episodes(trials=10)
           if e["checkpoint"] == "ckpt_0" and e["condition"] == "nominal"]
    write_results(tmp_path / "results.json", PROTOCOL, {"nominal": {"kind": "nominal"}}, eps)
    write_mp4(tmp_path / "videos" / "nominal_seed3.mp4", np.zeros((2, 16, 16, 3), np.uint8))
    write_report(tmp_path, reps=100)
    page = (tmp_path / "report.html").read_text()
    assert "a&lt;b&gt;&amp;c" in page and "a<b>" not in page
    assert '<video controls preload="metadata" src="videos/nominal_seed3.mp4">' in page
