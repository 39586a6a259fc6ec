"""Part IV, beyond one size (chapter 17): distillation (distillation), domain- and task-adaptive
pretraining (domain), the grids of smaller and specialised encoders as data (specialised), and
their runners (distillation_study, domain_study) with the logs both write (study_log)."""
