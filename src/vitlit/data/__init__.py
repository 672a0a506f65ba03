"""Data modules: CIFAR-10/100, SVHN and any class-folder image data set, and the batch augmentations they share."""

from vitlit.data.base import ImageClassificationDataModule
from vitlit.data.batch_augment import BatchAugment
from vitlit.data.cifar import CIFARDataModule
from vitlit.data.folder import ImageFolderDataModule

__all__ = ["BatchAugment", "CIFARDataModule", "ImageClassificationDataModule", "ImageFolderDataModule"]
