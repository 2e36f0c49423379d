"""Data transforms (mirrors ``megengine.data.transform``).

Pure NumPy; ``TorchTransformCompose`` (transforms of PIL images, e.g. torchvision's) needs Pillow.
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
    TorchTransformCompose,
    VisionTransform,
)

__all__ = [
    "TorchTransformCompose",
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
