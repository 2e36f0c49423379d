"""Vision datasets that read local files (``megengine.data.dataset.vision``)."""
from .cifar import CIFAR10, CIFAR100
from .cityscapes import Cityscapes
from .coco import COCO
from .folder import ImageFolder
from .imagenet import ImageNet
from .meta_vision import VisionDataset
from .mnist import MNIST
from .objects365 import Objects365
from .voc import PascalVOC

__all__ = ["VisionDataset", "ImageFolder", "ImageNet", "COCO", "Objects365", "PascalVOC", "Cityscapes", "MNIST",
           "CIFAR10", "CIFAR100"]
