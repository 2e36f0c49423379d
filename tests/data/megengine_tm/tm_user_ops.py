"""A user's module for the TracedModule fixtures: a ``wrap``ped function and a module registered as builtin.
MegEngine's files name them by this module (``tm_user_ops.my_scale``), so loading needs it importable; it runs
under MegEngine (writing the files) and under megxla (reading them)."""
try:
    import megengine.functional as F
    import megengine.module as M
    import megengine.traced_module as tm
except ImportError:  # megxla's tests, without the ``megengine`` alias
    import megxla.functional as F
    import megxla.module as M
    import megxla.traced_module as tm


@tm.wrap
def my_scale(x, k=2.0):
    return x * k


class Act(M.Module):
    def forward(self, x):
        return F.relu(x) - 0.5


tm.register_as_builtin(Act)
