"""Every experiment the book runs, in one registry.

Each kind of experiment is defined, and registered by name, in the module of its chapter:
- "grid": pretraining grids (mini_bert.train.grids.Experiment): chapter 8's, Part III's in
  mini_bert.improve (roberta, sharing, ablations), with their learning-rate sweeps;
- "finetune": fine-tuning studies (mini_bert.train.finetune_runs.Study), chapter 10;
- "study": chapter 15's studies at equal compute (mini_bert.beyond.equal_compute.Study);
- "chinese": chapter 16's Chinese pretraining studies (mini_bert.languages.chinese_pretraining);
- "multilingual": chapter 16's studies of one model for many languages
  (mini_bert.languages.multilingual_pretraining);
- "specialised": chapter 17's grids (mini_bert.smaller.specialised), run by
  mini_bert.smaller.distillation_study and mini_bert.smaller.domain_study.
Importing this module imports all of those modules, so every name resolves here whatever else
has been imported: the command line, the provenance check and the tests look experiments up
through it, never through a module that happens to have been imported first.
"""
from __future__ import annotations

from .beyond import equal_compute
from .improve import ablations, roberta, sharing  # noqa: F401  (they register Part III's grids)
from .languages import chinese_pretraining, multilingual_pretraining
from .smaller import distillation_study, domain_study, specialised
from .train import finetune_runs, grids

REGISTRIES = {
    "grid": grids.EXPERIMENTS,
    "finetune": finetune_runs.STUDIES,
    "study": equal_compute.STUDIES,
    "chinese": chinese_pretraining.STUDIES,
    "multilingual": multilingual_pretraining.STUDIES,
    "specialised": specialised.STUDIES,
}


def names(kind: str | None = None) -> list[str]:
    """The registered names of one kind (REGISTRIES), or of every kind."""
    if kind is not None and kind not in REGISTRIES:
        raise ValueError(f"unknown kind of experiment {kind!r}; the kinds: {', '.join(REGISTRIES)}")
    kinds = [kind] if kind else list(REGISTRIES)
    return [name for k in kinds for name in REGISTRIES[k]]


def find(name: str) -> tuple[str, object]:
    """(kind, definition) of the experiment registered as `name`, of whatever kind."""
    found = [(kind, registry[name]) for kind, registry in REGISTRIES.items() if name in registry]
    if not found:
        raise ValueError(f"no experiment is named {name!r}; the experiments: {', '.join(names())}")
    if len(found) > 1:  # tests/test_layout.py keeps the names apart
        raise ValueError(f"{name!r} names a {found[0][0]} and a {found[1][0]}")
    return found[0]


# The kinds whose logs are studies (grid logs of runs another module makes), by their module: each has
# STUDIES, get_study, study_grid, load_study, study_path and arm_fingerprint, the same way; a module
# whose logs have a format of their own names it as LOG_FORMAT (chapter 17's two: runs of their own).
STUDY_MODULES = {"study": equal_compute, "chinese": chinese_pretraining, "multilingual": multilingual_pretraining,
                 "distillation": distillation_study, "domain": domain_study}


def study_module(name: str):
    """The module that defines and runs the study `name` (chapter 15's, 16's or 17's)."""
    for module in STUDY_MODULES.values():
        if name in module.STUDIES:
            return module
    raise ValueError(f"unknown study {name!r}; the studies: "
                     f"{', '.join(n for m in STUDY_MODULES.values() for n in m.STUDIES)}")
