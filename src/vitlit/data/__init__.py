"""Data modules: the data contract (`ImageClassificationDataModule`), CIFAR-10/100, SVHN, image folders, digits."""

from vitlit.data.base import ImageClassificationDataModule
from vitlit.data.cifar import CIFARDataModule
from vitlit.data.csv_table import CSVImageDataModule
from vitlit.data.digits import DigitsDataModule
from vitlit.data.folder import ImageFolderDataModule

__all__ = [
    "CIFARDataModule",
    "CSVImageDataModule",
    "DigitsDataModule",
    "ImageClassificationDataModule",
    "ImageFolderDataModule",
]
