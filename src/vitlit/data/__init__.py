"""Data modules: CIFAR-10/100 and any class-folder image data set."""

from vitlit.data.base import ImageClassificationDataModule
from vitlit.data.cifar import CIFARDataModule
from vitlit.data.folder import ImageFolderDataModule

__all__ = ["CIFARDataModule", "ImageClassificationDataModule", "ImageFolderDataModule"]
