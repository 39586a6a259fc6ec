"""Part III, improve it (chapters 11-13): the ablations of RoBERTa (roberta) and ALBERT
(sharing), and the scores and sentence-task probes every ablation is judged by (ablations)."""
