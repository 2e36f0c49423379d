"""Generated training programs with session 73's features (``scripts/autojit_fuzz.py``), eagerly and under auto-jit:
every host read, caught error, final value, parameter, optimizer state and the random generator's next draw must
agree. Regression guards for the sweeps the script runs by hand (the sweeps found no auto-jit disagreement)."""
from __future__ import annotations

import pytest

from test_autojit_fuzz_s72 import fresh_auto_jit, fuzz  # noqa: F401  (the script, loaded once; its fixture)


# 31: GroupNorm, a QAT Linear with observers switched between steps, GradScaler unscaled and updated by hand with an
# infinite gradient at one step, MultiStepLR, param groups, autocast, topk, a second-order gradient, optimizer and
# module state saved to and loaded from a BytesIO, clip_grad_value. 202: BatchNorm2d switching train / eval, an
# LSTMCell carried over steps, GradScaler.backward, QAT, gm.record() / release(), a traced function, tile.
# 9: BatchNorm2d, an LSTM carried over steps, GradManager callbacks, pooling / interpolate, pad, sort.
@pytest.mark.parametrize("seed", [31, 202, 9])
def test_generated_program_with_new_features_agrees_with_eager(fresh_auto_jit, seed):
    gen = fuzz.Gen(seed, n_ops=8, steps=5)
    src = gen.source()
    diff, _, eager = fuzz.check(src, f"<autojit_fuzz {seed}>")
    assert diff is None, f"{diff}\n{src}"
    assert not any(e[0] == "crash" for e in eager), eager[-1]  # (the program runs to its end)


def test_an_index_checked_in_a_cluster_is_compared_at_its_issuing_line(fresh_auto_jit):
    """An index checked inside a cluster (``jit/_device_checks.py``) raises at the read that ran the cluster, its
    note naming the issuing line as ``<file>:17, and its cluster ran here`` when the file's source is not at hand
    (``exec``'d programs): the harness read that line as ``17,`` and crashed instead of comparing it."""
    src = '''
def program(log, err):
    mge.random.seed(0)
    rng = np.random.RandomState(0)
    nm = M.BatchNorm1d(4)
    W = mge.Parameter(np.ones((4, 4), 'float32'))
    gm = GradManager().attach([W])
    opt = optim.SGD([W], lr=0.1, momentum=0.9)
    for step in range(6):
        x = mge.Tensor(rng.uniform(-2, 2, (3, 4)).astype('float32'))
        try:
            with gm:
                y = F.matmul(x, W)
                idx = (F.abs(y[:, 0]) * 0).astype('int32') + (1 if step != 4 else 7)
                v = y[idx]
                loss = v.sum() + nm(y).sum()
                gm.backward(loss)
            opt.step().clear_grad()
            log('loss', loss.item())
        except IndexError as exc:
            log('error', err(exc))
            break
        log('state', [nm.running_mean, nm.running_var, W, opt.state_dict()])
'''
    diff, _, eager = fuzz.check(src)
    assert diff is None, diff
    assert [e for e in eager if e[0] == "error"] == \
        [("error", ["IndexOutOfRange", "getitem: index 7 is out of range for axis 0 of size 3", 15])], eager
