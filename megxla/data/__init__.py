"""Data loading (mirrors ``megengine.data``): datasets, samplers, transforms, DataLoader.

Pure NumPy + multiprocessing; importing it never imports JAX. Submodules
``dataset``, ``sampler``, ``collator``, ``dataloader`` and ``transform`` keep
MegEngine's paths, e.g. ``megxla.data.dataset.ArrayDataset``.
"""
from . import dataset, transform
from .collator import Collator
from .dataloader import DataLoader
from .sampler import (
    Infinite,
    MapSampler,
    RandomSampler,
    ReplacementSampler,
    Sampler,
    SequentialSampler,
    StreamSampler,
)

__all__ = [
    "Collator",
    "DataLoader",
    "Infinite",
    "MapSampler",
    "RandomSampler",
    "ReplacementSampler",
    "Sampler",
    "SequentialSampler",
    "StreamSampler",
]
