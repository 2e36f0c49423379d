"""MegEngine's path of its low-level autodiff API (``megengine.core.autodiff.grad``).

This package sits at MegEngine's path but in megxla's autodiff layer: its :class:`~.grad.Grad` is built on
:class:`megxla.autodiff.GradManager`'s tape, and nothing in ``megxla.core`` imports it.
"""
