"""Learning-rate schedulers (``megengine.optimizer.LRScheduler`` and ``MultiStepLR``).

A scheduler only writes ``param_group["lr"]``; optimizers read it at every step (as a tensor input, so a
traced step does not recompile when the schedule moves on).
"""
from __future__ import annotations

import math
import numbers
from abc import ABCMeta
from bisect import bisect_right
from typing import Iterable

from .optimizer import Optimizer, _check_hyper

__all__ = ["LRScheduler", "MultiStepLR"]


class LRScheduler(metaclass=ABCMeta):
    r"""Base class for learning-rate schedulers: ``step()`` advances the epoch counter and writes
    :meth:`get_lr`'s values into the optimizer's parameter groups.

    On creation with ``current_epoch=-1`` every group's ``initial_lr`` is set to its current ``lr``; resuming
    (``current_epoch >= 0``) requires ``initial_lr`` to be present already. The constructor takes one
    ``step()``, so the learning rate of epoch ``current_epoch + 1`` is in place afterwards.

    Args:
        optimizer: the optimizer whose learning rates are scheduled.
        current_epoch: the index of the last epoch. Default: -1

    Returns:
        a scheduler; subclasses implement :meth:`get_lr`.

    Example:
        >>> class Halve(LRScheduler):
        ...     def get_lr(self):
        ...         return [base / 2 ** self.current_epoch for base in self.base_lrs]
    """

    # the attributes state_dict() saves and load_state_dict() restores
    _state_keys = ("current_epoch",)

    def __init__(self, optimizer: Optimizer, current_epoch: int = -1):
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"optimizer argument given to the lr_scheduler should be Optimizer, got "
                            f"{type(optimizer).__name__}")
        _check_epoch(type(self).__name__, "current_epoch", current_epoch)
        self.optimizer = optimizer
        self.current_epoch = current_epoch
        if current_epoch == -1:
            for group in optimizer.param_groups:
                group.setdefault("initial_lr", group["lr"])
        else:
            for i, group in enumerate(optimizer.param_groups):
                if "initial_lr" not in group:
                    raise KeyError(f"param 'initial_lr' is not specified in param_groups[{i}] when resuming an "
                                   f"optimizer")
        self.base_lrs = [group["initial_lr"] for group in optimizer.param_groups]
        self.step()

    def state_dict(self):
        """The scheduler's state (its position and its settings) as a dict.

        Returns:
            a dict accepted by :meth:`load_state_dict`.

        Example:
            >>> import megxla as mge, megxla.optimizer as optim
            >>> sched = optim.MultiStepLR(optim.SGD([mge.Parameter([1.0])], lr=1.0), milestones=[2])
            >>> sched.state_dict()
            {'milestones': [2], 'gamma': 0.1, 'current_epoch': 0}
        """
        # (copies: the scheduler's own milestones list, edited through the returned dict, changed the schedule)
        return {key: list(v) if isinstance(v, list) else v for key, v in ((k, getattr(self, k)) for k in self._state_keys)}

    def load_state_dict(self, state_dict):
        """Restore a state saved by :meth:`state_dict`; missing keys raise KeyError before anything changes.

        Args:
            state_dict: a dict returned by :meth:`state_dict`.

        Example:
            >>> import megxla as mge, megxla.optimizer as optim
            >>> sched = optim.MultiStepLR(optim.SGD([mge.Parameter([1.0])], lr=1.0), milestones=[2])
            >>> sched.load_state_dict({"milestones": [2], "gamma": 0.1, "current_epoch": 5}); sched.current_epoch
            5
        """
        missing = [key for key in self._state_keys if key not in state_dict]
        if missing:
            raise KeyError(f"key(s) {missing} not specified in state_dict when loading state dict")
        # (checked before anything is set: unsorted milestones or a string gamma were taken, and the next step()
        # raised after moving the epoch on -- probe Y)
        values = {key: state_dict[key] for key in self._state_keys}
        self._check_state(values)
        for key, value in values.items():
            setattr(self, key, list(value) if isinstance(value, (list, tuple)) else value)

    def _check_state(self, values):
        """Raise where a state's values are not what this scheduler keeps (subclasses add their own)."""
        _check_epoch(type(self).__name__, "current_epoch", values["current_epoch"])

    def get_lr(self):
        """The learning rate of every parameter group at ``self.current_epoch``, as a list.

        Not abstract, as in MegEngine: a subclass that overrides :meth:`step` instead (a poly schedule writing
        ``param_group["lr"]`` itself) can be created; the base raises NotImplementedError.
        """
        raise NotImplementedError

    def step(self, epoch=None):
        """Advance to the next epoch (or to ``epoch``) and write the new learning rates into the optimizer.

        Args:
            epoch: the epoch to move to; default: the next one.

        Example:
            >>> import megxla as mge, megxla.optimizer as optim
            >>> opt = optim.SGD([mge.Parameter([1.0])], lr=1.0)
            >>> sched = optim.MultiStepLR(opt, milestones=[1]); sched.step(); opt.param_groups[0]["lr"]
            0.1
        """
        name = type(self).__name__
        if epoch is not None:
            _check_epoch(name, "epoch", epoch)
        previous = self.current_epoch
        # The epoch moves on only with learning rates to write: ``step("3")`` kept the string and every later
        # step() failed; a negative or NaN rate surfaced at opt.step(), far from the scheduler (probe Y)
        self.current_epoch = previous + 1 if epoch is None else epoch
        try:
            lrs = list(self.get_lr())
            for lr in lrs:
                _check_hyper(name, "lr", lr)
        except BaseException:
            self.current_epoch = previous
            raise
        for group, lr in zip(self.optimizer.param_groups, lrs):
            group["lr"] = lr


class MultiStepLR(LRScheduler):
    r"""Multiply every group's initial learning rate by ``gamma`` once for each milestone reached:
    ``lr = initial_lr * gamma ** (number of milestones <= current_epoch)``.

    Args:
        optimizer: the optimizer whose learning rates are scheduled.
        milestones: increasing epoch indices.
        gamma: multiplicative factor of learning-rate decay. Default: 0.1
        current_epoch: the index of the last epoch. Default: -1

    Returns:
        a scheduler; call :meth:`step` once per epoch.

    Example:
        >>> import megxla as mge, megxla.optimizer as optim
        >>> opt = optim.SGD([mge.Parameter([1.0])], lr=1.0)
        >>> sched = optim.MultiStepLR(opt, milestones=[2, 4], gamma=0.5)
        >>> lrs = []
        >>> for _ in range(6):
        ...     lrs.append(opt.param_groups[0]["lr"]); sched.step()
        >>> lrs
        [1.0, 1.0, 0.5, 0.5, 0.25, 0.25]
    """

    _state_keys = ("milestones", "gamma", "current_epoch")

    def __init__(self, optimizer: Optimizer, milestones: Iterable[int], gamma: float = 0.1,
                 current_epoch: int = -1):
        milestones = list(milestones)
        _check_milestones_gamma(milestones, gamma)  # (before the optimizer's groups are touched)
        self.milestones = milestones
        self.gamma = gamma
        super().__init__(optimizer, current_epoch)

    def _check_state(self, values):
        super()._check_state(values)
        _check_milestones_gamma(values["milestones"], values["gamma"])

    def get_lr(self):
        """``initial_lr * gamma ** bisect_right(milestones, current_epoch)`` for every group.

        Returns:
            a list with one learning rate per parameter group.

        Example:
            >>> import megxla as mge, megxla.optimizer as optim
            >>> sched = optim.MultiStepLR(optim.SGD([mge.Parameter([1.0])], lr=1.0), [1, 2], 0.5, current_epoch=-1)
            >>> sched.step(epoch=3); sched.get_lr()
            [0.25]
        """
        return [base_lr * self.gamma ** bisect_right(self.milestones, self.current_epoch)
                for base_lr in self.base_lrs]


def _check_epoch(owner, name, value):
    # (a number: an epoch counted in fractions -- stepped per iteration -- works with the milestones' bisection)
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{owner}: {name} must be a number (an int), got {value!r}")
    if not math.isfinite(value):
        raise ValueError(f"{owner}: {name} must be finite, got {value!r}")


def _check_milestones_gamma(milestones, gamma):
    if not isinstance(milestones, (list, tuple)) \
            or not all(isinstance(m, numbers.Integral) and not isinstance(m, bool) for m in milestones):
        raise TypeError(f"Milestones should be a list of increasing integers. Got {milestones!r}")
    if list(milestones) != sorted(milestones):
        raise ValueError(f"Milestones should be a list of increasing integers. Got {list(milestones)}")
    if isinstance(gamma, bool) or not isinstance(gamma, numbers.Real):
        raise TypeError(f"MultiStepLR: gamma must be a number, got {gamma!r}")
    if not (math.isfinite(gamma) and gamma >= 0):
        raise ValueError(f"MultiStepLR: gamma must be a finite number >= 0, got {gamma!r}")
