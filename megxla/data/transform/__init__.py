"""Data transforms (mirrors ``megengine.data.transform``).

Pure NumPy; ``TorchTransformCompose`` is omitted because it needs torchvision.
"""
from .meta_transform import PseudoTransform, Transform
from .vision import (
    BrightnessTransform,
    CenterCrop,
    ColorJitter,
    Compose,
    ContrastTransform,
    GaussianNoise,
    HueTransform,
    Lighting,
    Normalize,
    Pad,
    RandomCrop,
    RandomHorizontalFlip,
    RandomResize,
    RandomResizedCrop,
    RandomVerticalFlip,
    Resize,
    SaturationTransform,
    ShortestEdgeResize,
    ToMode,
    VisionTransform,
)

__all__ = [
    "Transform",
    "PseudoTransform",
    "VisionTransform",
    "Compose",
    "ToMode",
    "Normalize",
    "GaussianNoise",
    "Pad",
    "Resize",
    "ShortestEdgeResize",
    "RandomResize",
    "RandomCrop",
    "RandomResizedCrop",
    "CenterCrop",
    "RandomHorizontalFlip",
    "RandomVerticalFlip",
    "BrightnessTransform",
    "ContrastTransform",
    "SaturationTransform",
    "HueTransform",
    "ColorJitter",
    "Lighting",
]
