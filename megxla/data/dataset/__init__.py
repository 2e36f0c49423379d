"""Datasets (``megengine.data.dataset``): the map-style / stream-style bases, array wrappers, and the vision
datasets that read files from a local directory (:mod:`.vision`)."""
from .meta_dataset import ArrayDataset, ConcatDataset, Dataset, StreamDataset, VisionDataset
from .vision import (CIFAR10, CIFAR100, COCO, MNIST, Cityscapes, ImageFolder, ImageNet, Objects365, PascalVOC)

__all__ = ["Dataset", "StreamDataset", "ArrayDataset", "ConcatDataset", "VisionDataset", "ImageFolder", "ImageNet",
           "COCO", "Objects365", "PascalVOC", "Cityscapes", "MNIST", "CIFAR10", "CIFAR100"]
