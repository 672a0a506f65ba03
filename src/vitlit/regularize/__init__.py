"""Batch augmentation (opt-in part): random erasing and Mixup/CutMix on each training batch, on the training device.

Attached by name: `vitlit.regularize.batch_augment.BatchAugment` as ``--data.batch_augment`` in the recipes that use
it; the core never imports it. The rest of the pipeline (crops, flips, policies) is the core's `vitlit.data.pipeline`.
"""
