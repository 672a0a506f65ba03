"""The fast data path (opt-in part): splits held on the training device, batched policies, batch augmentation.

Attached through ``fast/defaults.yaml`` (the `DeviceData` callback, for ``--data.on_device``) and
``--data.batch_augment``; the core never imports it. Without this folder every split goes through the per-image
DataLoader.
"""

from vitlit.fast.batch_augment import BatchAugment
from vitlit.fast.loader import DeviceData, OnDevice

__all__ = ["BatchAugment", "DeviceData", "OnDevice"]
