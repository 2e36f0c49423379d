"""``megxla.jit.auto_jit_report()``: what auto-jit did, in words (issue 30: "so a user can see why code is slow")."""
from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import textwrap
import warnings

import numpy as np

import megxla as mge
import megxla.functional as F
import megxla.module as M
import megxla.optimizer as optim
from megxla.autodiff import GradManager
from megxla.jit import _autojit, auto_jit_report, reset_auto_jit_stats

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@contextlib.contextmanager
def _auto_jit():
    """Auto-jit on inside, as before after (the suite may run with ``MEGXLA_AUTO_JIT=1``)."""
    was = mge.config.auto_jit
    mge.config.auto_jit = True
    try:
        yield
    finally:
        mge.config.auto_jit = was


def _train(steps, read_mid_step, widths=(6,)):
    net = M.Linear(4, 3)
    gm = GradManager().attach(net.parameters())
    opt = optim.SGD(net.parameters(), lr=0.1)
    rng = np.random.RandomState(0)
    for i in range(steps):
        x = mge.tensor(rng.rand(widths[i % len(widths)], 4).astype("float32"))
        with gm:
            h = F.relu(net(x)) * 2 + 1
            if read_mid_step:
                scale = float(h.mean())  # a host read in the middle of the step
                h = h / scale
            loss = (h ** 2).mean() - h.sum() * 0.01
            gm.backward(loss)
        opt.step().clear_grad()
        loss.item()


def test_the_report_names_the_lines_that_cut_clusters_and_what_would_help():
    reset_auto_jit_stats()
    _autojit._sites.clear()
    with _auto_jit():
        _train(12, read_mid_step=True, widths=(6, 7, 8))
    report = auto_jit_report()
    lines = report.splitlines()
    assert lines[0].startswith("megxla auto-jit report")
    at = lines.index("where clusters were cut (most often first):") + 1
    cuts = lines[at:at + 2]
    # the mid-step read and the step's end, each at its own line of this file, with its source
    assert any("host read" in ln and "scale = float(h.mean())" in ln and "test_autojit_report.py" in ln
               for ln in cuts), report
    assert any("opt.step" in ln and "opt.step().clear_grad()" in ln for ln in cuts), report
    counts = [int(ln.split()[0].replace(",", "")) for ln in cuts if "host read" in ln or "opt.step" in ln]
    assert all(c >= 12 for c in counts), report
    # the batches had 6, 7 and 8 rows: lines whose clusters changed, said in words
    at = lines.index("lines whose clusters changed (each change a new key: compiled, or run op by op until it "
                     "recurs):") + 1
    assert "test_autojit_report.py" in lines[at] and " of " in lines[at], report
    assert "  - a host read in the middle of a training step" in report, report


def test_a_step_with_one_read_at_its_end_gets_no_hint_about_reads():
    reset_auto_jit_stats()
    _autojit._sites.clear()
    with _auto_jit():
        _train(8, read_mid_step=False)
    report = auto_jit_report()
    assert "  - a host read in the middle" not in report, report
    cached = next(ln for ln in report.splitlines() if ln.strip().startswith("from the cache "))
    assert int(cached.split()[3].replace(",", "")) >= 5, report  # (the step's cluster recurs: run by its executable)


def test_host_reads_before_the_first_step_get_no_hint_about_reads():
    # A model's initialisation drawing weights on the host (``M.init.normal_`` reads the RNG key) cut the pending
    # init ops once a layer: as many reads as the short run had steps, reported as "a host read in the middle of a
    # training step" (VAN-MegEngine's init_weights, found by a probe). Reads before the first step end are setup.
    reset_auto_jit_stats()
    _autojit._sites.clear()
    _autojit._local.steps = 0  # (a fresh program's thread: no step ended yet)
    with _auto_jit():
        layers = [M.Conv2d(4, 4, 3, padding=1) for _ in range(8)]
        for conv in layers:
            w = mge.tensor(np.random.rand(4, 4))
            w *= 0.1
            w += 0.0
            conv.extra = F.clip(w, -1, 1) * 1.0  # (pending ops ...)
            M.init.normal_(conv.weight, 0, 0.1)  # (... cut by the draw's host read)
        _train(6, read_mid_step=False)
    report = auto_jit_report()
    assert "host read" in report and "  - a host read in the middle" not in report, report


def test_no_cluster_says_so():
    reset_auto_jit_stats()
    assert auto_jit_report() == "megxla auto-jit report: no cluster ran (is auto-jit on? megxla.config.auto_jit = True)"


def test_megxla_run_auto_jit_report_prints_it_when_the_program_ends(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent("""
        import numpy as np
        import megengine as mge, megengine.functional as F, megengine.module as M, megengine.optimizer as optim
        from megengine.autodiff import GradManager
        net = M.Linear(4, 3)
        gm = GradManager().attach(net.parameters())
        opt = optim.SGD(net.parameters(), lr=0.1)
        for i in range(6):
            with gm:
                loss = (net(mge.tensor(np.ones((5, 4), "float32"))) ** 2).mean()
                gm.backward(loss)
            opt.step().clear_grad()
            print("loss", round(loss.item(), 4))
    """))
    env = dict(os.environ, PYTHONPATH=ROOT)
    env.pop("MEGXLA_AUTO_JIT", None)
    proc = subprocess.run([sys.executable, "-m", "megxla.run", "--auto-jit-report", str(script)], env=env,
                          capture_output=True, text=True, timeout=300, cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("loss ") == 6
    assert "megxla auto-jit report" in proc.stderr, proc.stderr
    # (the read after ``opt.step()`` is the step's cut, named at that line)
    assert "opt.step       " + str(script) + ":12 (`opt.step().clear_grad()`)" in proc.stderr, proc.stderr


def test_a_line_that_gave_up_compiling_is_named_with_the_advice_to_pad():
    reset_auto_jit_stats()
    _autojit._sites.clear()
    w = mge.tensor(np.ones(4, "float32"))
    with _auto_jit():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # (the megamorphic warning: the report says the same)
            for n in range(1, 60):  # a new shape at every step
                x = mge.tensor(np.ones((n, 4), "float32"))
                ((F.exp(x) * 2 + 1).sum() * w + (x * x).sum()).numpy()  # the line
    lines = auto_jit_report().splitlines()
    at = lines.index("lines that gave up compiling (too many different clusters; run eagerly):") + 1
    assert "# the line" in lines[at], lines
    assert any(ln.startswith("  - shapes that change at every step") for ln in lines), lines


def test_a_line_that_gives_up_twice_is_listed_once():
    # a site whose changing clusters are split first, then give up compiling, was listed as megamorphic twice
    reset_auto_jit_stats()
    site = (__file__, 1, "a line")
    st = [3, 0, 3, None, None, None, None, False]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _autojit._megamorphic(st, site, "host read", "most of their ops run op by op")
        _autojit._megamorphic(st, site, "host read")
    assert len(_autojit.auto_jit_stats()["megamorphic"]) == 1
    assert st[0] == -1


def test_a_read_made_through_the_standard_library_is_named_at_the_users_line():
    # A read ``copy.deepcopy`` makes (of a selection kept padded on the device: its rows are read) was reported at
    # copy.py's line (`y = copier(memo)`), where the user's line is the one that called it (found by a probe: OTA).
    import copy
    reset_auto_jit_stats()
    with _auto_jit():
        x = mge.tensor(np.arange(12, dtype="float32").reshape(6, 2))
        sel = (x * 2)[(x[:, 0] > 3)]
        y = copy.deepcopy(sel)  # the line the cut must name
        assert y.numpy().shape == (4, 2)
    from megxla.jit import auto_jit_stats
    wheres = [where for _, reason, where in auto_jit_stats()["cuts"] if reason == "host read"]
    assert wheres and all("test_autojit_report.py" in w and "copy" not in w.split("(")[0] for w in wheres), wheres
    assert any("copy.deepcopy(sel)" in w for w in wheres), wheres
