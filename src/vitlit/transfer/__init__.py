"""Transfer learning (opt-in part): staged unfreezing and knowledge distillation.

`finetune.FreezeSchedule` is a callback and `distill.DistilledViTClassifier` a model class; both are named in YAML
(configs/addons/).
"""
