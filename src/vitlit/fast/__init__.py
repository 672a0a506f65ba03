"""The fast data path (opt-in part): splits held on the training device, batched policies, batch augmentation.

Attached by name: `vitlit.fast.loader.DeviceData` in ``vitlit/defaults.yaml`` (for ``--data.on_device``) and
`vitlit.fast.batch_augment.BatchAugment` as ``--data.batch_augment`` in the recipes that use it; the core never
imports it. Without this folder (and its line in ``defaults.yaml``) every split goes through the per-image DataLoader.
"""
