"""Part IV, beyond one size (chapter 17): distillation (distillation), domain- and task-adaptive
pretraining (domain), and the grids of smaller and specialised encoders (specialised)."""
