"""Provenance by behaviour (mini_bert.train.fingerprint, mini_bert.provenance): a shipped log is current
when the current code reproduces its fingerprints. Proved both ways: harmless edits (an added
function, a moved module) keep a log current although the source hash changes; a changed number
with the source untouched (a patched loss) or a changed arm recipe makes it stale, naming the arm
and the number."""
from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
import types
from pathlib import Path

import pytest
import torch

from mini_bert.train import fingerprint as fpm
from mini_bert.build import objectives
from mini_bert import provenance
from mini_bert.train import grids, runs
from mini_bert.train import pretrained as mb_pretrained
from mini_bert.core.cache import PACKAGE, code_version, sha256_file
from mini_bert.train.fingerprint import compare, fingerprint, is_current

SMOKE = grids.RESULTS_DIR / "smoke-cpu.json"
REPO = PACKAGE.parent


# ------------------------------------------------------------------ compare

def _fp(**close):
    return fingerprint({"recipe": {"lr": 0.002}}, {"steps": 6, "batch@0": "ab"},
                       {"loss": [9.2, 9.1], "test.accuracy": 0.5, **close})


def test_compare_names_every_number_that_moved_and_forgives_rounding():
    logged = _fp()
    assert compare(logged, _fp()) == []
    assert compare(logged, _fp(loss=[9.2 * (1 + 2e-5), 9.1])) == []  # another CPU's rounding
    assert compare(logged, _fp(**{"test.accuracy": 0.5 + 1 / 24})) == []  # one item of a few dozen
    moved = compare(logged, _fp(loss=[9.2 * 1.01, 9.1]))
    assert len(moved) == 1 and moved[0].startswith("close.loss: logged [9.2, 9.1], now [9.292")
    changed = fingerprint({"recipe": {"lr": 0.001}}, {"steps": 7, "batch@0": "ab"}, logged["close"])
    assert compare(logged, changed) == ["definition.recipe.lr: logged 0.002, now 0.001",
                                        "exact.steps: logged 6, now 7"]
    other_prefix = {**logged, "prefix": {**logged["prefix"], "steps": 3}}
    assert "backfill" in compare(other_prefix, logged)[0]
    nan = fingerprint({}, {}, {"sentence_loss": [None, None]})
    assert compare(nan, nan) == [] and compare(nan, fingerprint({}, {}, {"sentence_loss": [None, 1.0]}))


def test_a_batch_hash_sees_one_changed_token():
    batch = {"input_ids": torch.arange(12).view(3, 4), "mlm_labels": torch.full((3, 4), -100)}
    changed = {**batch, "input_ids": batch["input_ids"].clone()}
    changed["input_ids"][2, 3] = 0
    assert fpm.tensor_sha256(batch) == fpm.tensor_sha256({k: v.clone() for k, v in batch.items()})
    assert fpm.tensor_sha256(batch) != fpm.tensor_sha256(changed)


# ------------------------------------------------------------------ the shipped logs

def test_every_shipped_log_carries_a_fingerprint_of_every_arm():
    for path in provenance.shipped_logs():
        log = provenance.read_log(path)
        arms = {r["arm"] for r in log["runs"]}
        assert set(log.get("fingerprints", {})) == arms, path.name
        for arm, fp in log["fingerprints"].items():
            assert fp["format"] == fpm.FORMAT and fp["prefix"] == fpm.PREFIX.__dict__, (path.name, arm)
            assert fp["seed"] == min(r["seed"] for r in log["runs"] if r["arm"] == arm)


def test_the_record_of_the_last_check_covers_the_current_code_and_every_shipped_log():
    """results/verified.json is written by `python -m mini_bert provenance --record` after a passing
    check (CI runs the check itself: `make provenance`). What `.stale` answers from it must be
    true now: after any code change, run the check again and record it."""
    record = json.loads(fpm.VERIFIED.read_text())
    assert record["code_version"] == fpm.verification_version(), \
        "the code changed since the last check: python -m mini_bert provenance --record"
    assert record["logs"] == {p.name: sha256_file(p) for p in provenance.shipped_logs()}, \
        "a log changed since the last check: python -m mini_bert provenance --record"
    for path in provenance.shipped_logs():
        assert is_current(path, "not-this-code", code_version())


def test_a_log_is_current_by_its_own_code_version_or_by_the_record(tmp_path):
    copy = tmp_path / SMOKE.name
    shutil.copy(SMOKE, copy)
    assert is_current(copy, "v1", "v1")  # made by this very code
    assert is_current(copy, "v0", "v1")  # the same bytes as a checked log
    copy.write_text(copy.read_text().replace('"seed": 0', '"seed": 0 ', 1))
    assert not is_current(copy, "v0", "v1")  # edited since the check: not covered


# ------------------------------------------------------------------ both ways, on the smoke log

def smoke_problems() -> list[str]:
    return provenance.check_logs([SMOKE], jobs=1, progress=False)["problems"]


def test_the_smoke_log_is_reproduced_by_the_current_code():
    assert smoke_problems() == []


def test_a_patched_loss_with_the_source_untouched_makes_the_log_stale(monkeypatch):
    """Cross-entropy scaled by 1.01 at import: no source file changes (the code version is the
    same), and the check names the log, the arm and the losses that moved."""
    version = code_version()
    real = objectives.F
    monkeypatch.setattr(objectives, "F", types.SimpleNamespace(
        cross_entropy=lambda *a, **k: 1.01 * real.cross_entropy(*a, **k)))
    assert code_version() == version
    problems = smoke_problems()
    assert any(p.startswith("smoke-cpu.json, arm 'mask-15' (seed 0): close.loss: logged [") for p in problems), problems
    assert any("arm 'mask-25'" in p and "close.mlm_loss" in p for p in problems)
    assert not any("definition" in p or "exact." in p for p in problems)  # the same data, the same recipe


def test_a_changed_arm_recipe_makes_the_log_stale(monkeypatch):
    smoke = grids.get_experiment("smoke")
    monkeypatch.setitem(smoke.arms, "mask-25", {"mask_ratio": 0.3})
    problems = smoke_problems()
    assert "smoke-cpu.json, arm 'mask-25' (seed 0): definition.recipe.mask_ratio: logged 0.25, now 0.3" in problems
    assert not any("mask-15" in p for p in problems)


def _run_check_in(package_root: Path, log: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    code = ("import json, sys; from mini_bert import provenance as p; from mini_bert.core import cache; "
            f"r = p.check_logs([{str(log)!r}], jobs=1, progress=False); "
            "print(json.dumps({'problems': r['problems'], 'version': cache.code_version(), "
            "'file': cache.PACKAGE.as_posix()}))")
    result = subprocess.run([sys.executable, "-c", code], cwd=package_root, capture_output=True, text=True,
                            env={**os.environ, "PYTHONPATH": str(package_root), "OMP_NUM_THREADS": "1",
                                 **(env or {})}, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return result


def _package_copy(tmp_path: Path) -> Path:
    root = tmp_path / "copy"
    shutil.copytree(PACKAGE, root / "mini_bert", ignore=shutil.ignore_patterns("__pycache__", "pretrained"))
    return root


def test_harmless_edits_keep_the_log_current_although_the_source_hash_changes(tmp_path):
    """A copy of the package with an unused function added to train/loop.py and train/heldout.py
    moved to core/heldout.py (its importers rewritten): the source hash of the run code changes,
    which staled every log under the old rule; the fingerprints still pass."""
    root = _package_copy(tmp_path)
    package = root / "mini_bert"
    loop = package / "train" / "loop.py"
    loop.write_text(loop.read_text() + "\n\ndef unused_helper(x):\n    return x + 1\n")
    (package / "train" / "heldout.py").rename(package / "core" / "heldout.py")
    moved = package / "core" / "heldout.py"
    # its imports of train/ now reach up and over; those of core/ stay
    moved.write_text(moved.read_text().replace("from .", "from ..train.").replace("from ..train..", "from .."))
    for path in package.rglob("*.py"):
        text = path.read_text()
        for old, new in (("from .heldout import", "from ..core.heldout import"),
                         ("from ..train.heldout import", "from ..core.heldout import")):
            if path != moved and old in text:
                text = text.replace(old, new)
        path.write_text(text)
    out = json.loads(_run_check_in(root, SMOKE).stdout.strip().splitlines()[-1])
    assert out["file"] == package.as_posix()  # the edited copy was the code checked
    assert out["version"] != code_version()  # the old rule: stale
    assert out["problems"] == []  # the fingerprints: current


@pytest.mark.skipif(os.environ.get("ATEN_CPU_CAPABILITY") == "default", reason="already on the plain kernels")
def test_the_fingerprints_hold_on_the_plain_cpu_kernels():
    """torch's portable kernels (no AVX) round sums another way, as another laptop would: within
    the measured tolerance, the smoke log's fingerprints still pass."""
    out = json.loads(_run_check_in(REPO, SMOKE, {"ATEN_CPU_CAPABILITY": "default"}).stdout.strip().splitlines()[-1])
    assert out["problems"] == []


def test_the_shipped_book_model_is_what_the_current_code_trains():
    """mini_bert/pretrained/tiny-wiki's fingerprint, recomputed with its own prefix, passes: else a
    fresh runtime would install the shipped copy, find it stale and train for minutes."""
    saved = json.loads((mb_pretrained.shipped_pretrained_path("tiny-wiki") / runs.RUN_FILE).read_text())
    logged = saved["fingerprint"]
    recipe = mb_pretrained.PRETRAINED["tiny-wiki"]
    assert compare(logged, runs.run_fingerprint(recipe, prefix=fpm.Prefix(**logged["prefix"]))) == []


# ------------------------------------------------------------------ resuming a log after a refactor

def test_a_log_of_other_code_resumes_only_when_its_fingerprints_pass(tmp_path):
    log = json.loads(SMOKE.read_text())
    log["code_version"] = "0123456789ab"  # as if made before a refactor
    path, calls = tmp_path / "log.json", []

    def same(arm, seed, prefix):
        calls.append((arm, seed, prefix))
        return {k: v for k, v in log["fingerprints"][arm].items() if k != "seed"}

    kept = fpm.resume_fingerprints(log, path, code_version(), [], same)
    assert kept == log["fingerprints"] and sorted(calls) == [("mask-15", 0, fpm.PREFIX), ("mask-25", 0, fpm.PREFIX)]
    assert fpm.resume_fingerprints(log, path, "0123456789ab", [], lambda *a: pytest.fail("same code: no check")) \
        == log["fingerprints"]

    def moved(arm, seed, prefix):
        fp = same(arm, seed, prefix)
        return {**fp, "close": {**fp["close"], "parameter_norm": fp["close"]["parameter_norm"] * 1.01}}

    with pytest.raises(ValueError, match=r"makes differently \(arm 'mask-15': close.parameter_norm: logged .*delete"):
        fpm.resume_fingerprints(log, path, code_version(), [], moved)
    # A fingerprint is recomputed with the prefix it was logged with (a new default changes no verdict).
    older = json.loads(json.dumps(log))
    for fp in older["fingerprints"].values():
        fp["prefix"]["steps"] = 3
    calls.clear()
    with pytest.raises(ValueError):  # `same` answers with the default prefix's numbers
        fpm.resume_fingerprints(older, path, code_version(), [], same)
    assert calls[0][2] == fpm.Prefix(**{**fpm.PREFIX.__dict__, "steps": 3})
    # An arm planned but never run keeps no fingerprint of other code: it gets the current code's.
    only_one = {**log, "runs": [r for r in log["runs"] if r["arm"] == "mask-15"]}
    fresh = fpm.resume_fingerprints(only_one, path, code_version(), [("mask-25", 0)],
                                    lambda arm, seed, prefix: {"new": arm} if arm == "mask-25" else same(arm, seed,
                                                                                                           prefix))
    assert fresh["mask-25"] == {"seed": 0, "new": "mask-25"} and fresh["mask-15"] == log["fingerprints"]["mask-15"]
    del log["fingerprints"]
    with pytest.raises(ValueError, match=r"without fingerprints of arm\(s\) \['mask-15', 'mask-25'\]"):
        fpm.resume_fingerprints(log, path, code_version(), [], same)


# ------------------------------------------------------------------ the command line

def test_the_command_checks_named_logs_and_refuses_a_missing_one(capsys):
    from mini_bert.__main__ import main

    assert main(["provenance", str(SMOKE), "--no-progress", "--jobs", "1"]) == 0
    out = capsys.readouterr().out
    assert "1 log(s), 2 arm(s) checked" in out and "all current" in out
    assert main(["provenance", "no-such-log.json"]) == 2
    assert "no such log: no-such-log.json" in capsys.readouterr().err
    assert main(["provenance", str(SMOKE), "--record"]) == 2
    assert "--record covers every shipped log" in capsys.readouterr().err


# ------------------------------------------------------------------ one full logged run per log (slow)

SLOW = os.environ.get("MINI_BERT_SLOW") == "1"
# A full run trained again on this machine kind reproduces its log to the last bits; another CPU
# drifts (the measured figures are at SCORE_ABS_TOL in conftest.py and RERUN_TOLERANCE in
# test_finetune_runs.py): held-out and probe accuracies within 0.01, macro-F1 within 0.03, losses 1%.
RERUN_ABS = {"accuracy": 0.01, "macro_f1": 0.03, "majority": 0.0}


def quickest_record(log: dict) -> dict:
    """The logged run that is quickest to train again (by its logged seconds)."""
    def seconds(record):
        return record.get("seconds") or record.get("provenance", {}).get("train_seconds") or 0.0

    return min(log["runs"], key=seconds)


def rerun(path: Path, record: dict) -> dict:
    """The record's run trained and scored again by the code that made the log: its metrics."""
    from mini_bert.improve import ablations
    from mini_bert.beyond import equal_compute
    from mini_bert.train import finetune_runs
    from mini_bert.train.finetune_runs import run_finetune

    log = provenance.read_log(path)
    kind, name = provenance.log_kind(log), log.get("experiment") or log.get("study")
    arm, seed = record["arm"], record["seed"]
    if kind == provenance.GRID:
        recipe = grids.arm_recipe(grids.get_experiment(name), arm, log["scale"])
        return runs.run(recipe, seed, cache=False, progress=False, device="cpu",
                        **grids.grid_documents(log.get("max_docs"))).metrics
    if kind == provenance.SCORES:
        return ablations.score_run(grids.get_experiment(name), arm, seed, log["scale"], device="cpu")["metrics"]
    if kind == provenance.FINETUNE:
        settings = finetune_runs.get_study(name).arm_settings(log["scale"])[arm]
        return run_finetune(settings, seed, device="cpu")["metrics"]
    return equal_compute.run_arm(equal_compute.get_study(name), arm, seed, log["scale"], device="cpu")["metrics"]


@pytest.mark.skipif(not SLOW, reason="a full logged run of every log (1 to 10 minutes each): MINI_BERT_SLOW=1")
@pytest.mark.parametrize("path", sorted(grids.RESULTS_DIR.glob("*-cpu*.json")), ids=lambda p: p.stem)
def test_one_logged_run_of_each_log_is_reproduced(path, cache):
    record = quickest_record(provenance.read_log(path))
    again = rerun(path, record)
    assert set(again) == set(record["metrics"])
    moved = {}
    for key, logged in record["metrics"].items():
        kind = key.rsplit(".", 1)[-1]
        if kind == "targets":
            ok = again[key] == logged
        elif kind in RERUN_ABS:
            ok = abs(again[key] - logged) <= RERUN_ABS[kind]
        else:  # losses
            ok = math.isclose(again[key], logged, rel_tol=0.01)
        if not ok:
            moved[key] = (logged, again[key])
    assert moved == {}, f"{path.name}, arm {record['arm']!r} seed {record['seed']}: {moved}"


def test_a_studys_logs_go_to_one_worker_and_the_largest_groups_first():
    # The shipped logs' arms as the check schedules them: every arm exactly once; a pretraining
    # grid's or scores log's arms a group of their own; every other kind (a study of chapters
    # 15-18, fine-tuning) all its logs in one group, so that one worker builds its setup once.
    paths = provenance.shipped_logs()
    tasks = [(str(p), arm, seed, {}) for p in paths
             for arm, seed in fpm.fingerprinted_arms(provenance.read_log(p)["runs"]).items()]
    groups = provenance.task_groups(tasks)
    assert sorted(t for g in groups for t in g) == sorted(tasks)
    assert [len(g) for g in groups] == sorted((len(g) for g in groups), reverse=True)
    kinds = {str(p): provenance.log_kind(provenance.read_log(p)) for p in paths}
    for group in groups:
        logs = {t[0] for t in group}
        assert len({kinds[p] for p in logs}) == 1
        if kinds[group[0][0]] in (provenance.GRID, provenance.SCORES):
            assert len(logs) == 1
        else:  # the whole kind
            assert logs == {p for p, kind in kinds.items() if kind == kinds[group[0][0]]}
    assert any(len({t[0] for t in g}) > 1 for g in groups)  # two logs of a study share a worker
