"""vitlit: train Vision Transformers on one GPU with PyTorch Lightning, timm and LightningCLI."""

from vitlit.data import CIFARDataModule, ImageClassificationDataModule, ImageFolderDataModule
from vitlit.model import ViTClassifier

__all__ = ["CIFARDataModule", "ImageClassificationDataModule", "ImageFolderDataModule", "ViTClassifier"]
__version__ = "0.1.0"
