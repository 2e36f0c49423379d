"""``megengine.data.dataset.vision.meta_vision``: the base class of vision datasets."""
from ..meta_dataset import VisionDataset

__all__ = ["VisionDataset"]
