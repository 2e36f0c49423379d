"""Names the docstring examples of ``megxla`` use (``pytest --doctest-modules megxla``): MegEngine's docs write
their examples against ``megengine``, ``F``, ``M``, ``np`` and ``Tensor`` imported once, at the top of a page."""
import numpy as np
import pytest


@pytest.fixture(autouse=True)
def _doctest_names(doctest_namespace):
    import megxla
    import megxla.functional as F
    import megxla.module as M
    import megxla.optimizer as optim
    doctest_namespace.update(np=np, mge=megxla, megxla=megxla, megengine=megxla, F=F, M=M, optim=optim,
                             Tensor=megxla.Tensor, tensor=megxla.Tensor, Parameter=megxla.Parameter)
