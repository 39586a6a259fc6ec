"""Part II, train it (chapters 8-10): the recipe and its budget (recipe), batches (batches), the
loop (loop), scoring and held-out data (evaluation, heldout), checkpoints (checkpoint),
pretraining and seeded runs with their grids (pretraining, runs, engine, fingerprint), looking
inside a trained model (inspection), and fine-tuning: tasks, heads, strategies and the logged
runs (tasks, span_task, finetuning, finetune_runs)."""
