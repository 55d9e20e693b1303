"""Run folders of older schema versions load as the runs they were, through one migrate()."""

import copy
import json

import pytest
import torch
import yaml

import dgp
from dgp.checks import canonical
from identifiable_cl import rundir
from identifiable_cl.components import assemble, load_run, resolve
from identifiable_cl.config import DEFAULTS
from identifiable_cl.migration import SCHEMA_VERSION, migrate, schema_version
from identifiable_cl.training import Trainer
from tests.tiny import TINY, tiny_config


@pytest.fixture
def run(tmp_path, monkeypatch):
    """A run saved by today's code: 20 steps of the default process with integer-valued numbers."""
    import identifiable_cl.training as training

    monkeypatch.setattr(training, "draw_figures_if_possible", lambda run_dir: {})
    config = tiny_config(**{"train.steps": 20, "train.checkpoint_every": 10, "dgp.conditional.scale": 0.1,
                            "dgp.space.high": 1})
    Trainer.create(config, tmp_path / "run", progress=False).run()
    return tmp_path / "run"


def without_trained(run_dir):
    """The run's checkpoint as versions before 4 wrote it: without the config sections it was trained with."""
    state = rundir.load_torch(run_dir / rundir.CHECKPOINT)
    del state["trained"]
    torch.save(state, run_dir / rundir.CHECKPOINT)


def without_sampler(run_dir, version):
    """The run's files as schema ``version`` (< 3) wrote them: no dgp.sampler in config.yaml nor in dgp.pt's
    config, whose fingerprint is then that of a version 1 sampler."""
    without_trained(run_dir)
    meta = rundir.read_json(run_dir / rundir.META)
    meta["schema_version"] = version
    (run_dir / rundir.META).write_text(json.dumps(meta))
    config = yaml.safe_load((run_dir / rundir.CONFIG).read_text())
    del config["dgp"]["sampler"]
    (run_dir / rundir.CONFIG).write_text(yaml.safe_dump(config, sort_keys=False))
    saved = rundir.load_torch(run_dir / rundir.DGP)
    config = {k: v for k, v in saved["config"].items() if k != "sampler"}
    earlier = dgp.Process({**config, "sampler": 1}, saved["seed"])
    earlier.load_state_dict(saved["state"])
    torch.save({**saved, "config": config, "fingerprint": earlier.fingerprint()}, run_dir / rundir.DGP)


def as_version_1(run_dir):
    """The run's files as a run saved before the schema version existed would hold them: no schema_version
    in meta.json, no train.matmul and eval.n_centres in config.yaml, the earlier fingerprint in dgp.pt."""
    without_sampler(run_dir, 2)
    meta = rundir.read_json(run_dir / rundir.META)
    del meta["schema_version"]
    (run_dir / rundir.META).write_text(json.dumps(meta))
    config = yaml.safe_load((run_dir / rundir.CONFIG).read_text())
    del config["train"]["matmul"], config["eval"]["n_centres"], config["eval"]["final_n_centres"]
    (run_dir / rundir.CONFIG).write_text(yaml.safe_dump(config, sort_keys=False))
    saved = rundir.load_torch(run_dir / rundir.DGP)
    process = dgp.load_process(saved)
    written = {k: v for k, v in process.config.items() if k != "sampler"}
    earlier = process.fingerprint_of({"config": written, "seed": process.seed})
    assert earlier != process.fingerprint()  # the box's high: 1 is hashed as written
    torch.save({**saved, "fingerprint": earlier}, run_dir / rundir.DGP)
    return process.fingerprint()


def test_todays_run_records_the_schema_version_and_loads_unchanged(run):
    assert rundir.read_json(run / rundir.META)["schema_version"] == SCHEMA_VERSION
    c = load_run(run)
    assert c.config == rundir.read_config(run) and c.steps_done == 20
    config, saved = rundir.read_config(run), rundir.load_torch(run / rundir.DGP)
    assert migrate(config, saved, SCHEMA_VERSION) == (config, saved)


def test_a_version_1_run_gets_the_behaviour_it_ran_with_and_resumes(run):
    fingerprint = as_version_1(run)
    with pytest.raises(ValueError, match="does not match its parameters"):
        dgp.load_process(rundir.load_torch(run / rundir.DGP))  # only the migration knows the earlier hash
    c = load_run(run)
    # they ran their float32 products through torch's BLAS
    assert c.config["train"]["matmul"] == "blas" != DEFAULTS["train"]["matmul"]
    # and fitted every nonlinear R² on 1000 centres
    assert c.config["eval"]["n_centres"] == 1000 != DEFAULTS["eval"]["n_centres"]
    assert c.config["eval"]["final_n_centres"] == DEFAULTS["eval"]["final_n_centres"] == 1000
    assert c.process.fingerprint() == fingerprint and c.steps_done == 20
    summary = Trainer.resume(run, {"train.steps": 30}, progress=False).run()
    assert summary["steps"] == 30 and summary["dgp_fingerprint"] == fingerprint
    assert yaml.safe_load((run / rundir.CONFIG).read_text())["train"]["matmul"] == "blas"  # rewritten as it ran


def test_a_damaged_earlier_fingerprint_is_still_refused(run):
    as_version_1(run)
    saved = rundir.load_torch(run / rundir.DGP)
    torch.save({**saved, "fingerprint": "0" * 16}, run / rundir.DGP)
    with pytest.raises(ValueError, match="dgp.pt: saved process fingerprint 0000000000000000 does not match"):
        load_run(run)


@pytest.mark.parametrize("meta,message", [
    ({"schema_version": SCHEMA_VERSION + 1}, f"schema_version={SCHEMA_VERSION + 1} is newer than this identifiable-cl "
                                             f"reads \\(up to {SCHEMA_VERSION}\\)"),
    ({"schema_version": "2"}, "schema_version='2' is invalid: a version number >= 1"),
])
def test_versions_it_cannot_read_are_named(run, meta, message):
    (run / rundir.META).write_text(json.dumps(meta))
    with pytest.raises(ValueError, match=f"meta.json: {message}"):
        load_run(run)
    assert schema_version({}) == schema_version(None) == 1


SPHERE = {"dgp.space.name": "sphere", "dgp.conditional.name": "vmf", "dgp.conditional.kappa": 5.0,
          "encoder.normalize": "sphere"}


def test_a_version_2_run_resumes_with_the_draws_of_the_earlier_sampler(tmp_path, monkeypatch):
    import identifiable_cl.training as training

    monkeypatch.setattr(training, "draw_figures_if_possible", lambda run_dir: {})
    config = tiny_config(**{"train.steps": 10, "train.checkpoint_every": 10, "dgp.sampler": 1, **SPHERE})
    Trainer.create(config, tmp_path / "run", progress=False).run()
    fingerprint = rundir.load_torch(tmp_path / "run" / rundir.DGP)["fingerprint"]
    without_sampler(tmp_path / "run", 2)
    assert rundir.load_torch(tmp_path / "run" / rundir.DGP)["fingerprint"] == fingerprint  # v1 is not hashed
    c = load_run(tmp_path / "run")
    assert c.config["dgp"]["sampler"] == c.process.sampler == c.process.conditional.sampler == 1
    assert c.process.fingerprint() == fingerprint
    earlier = dgp.Process({**c.process.config, "sampler": 1}, c.process.seed)
    today = dgp.Process({**c.process.config, "sampler": 2}, c.process.seed)
    draws = [p.sample(64, p.make_generator(3)).z_pos for p in (c.process, earlier, today)]
    assert torch.equal(draws[0], draws[1]) and not torch.allclose(draws[0], draws[2])
    assert today.fingerprint() != fingerprint
    summary = Trainer.resume(tmp_path / "run", {"train.steps": 20}, progress=False).run()
    assert summary["steps"] == 20 and summary["dgp_fingerprint"] == fingerprint
    assert yaml.safe_load((tmp_path / "run" / rundir.CONFIG).read_text())["dgp"]["sampler"] == 1


def test_new_runs_draw_with_the_latest_sampler(run):
    assert rundir.read_config(run)["dgp"]["sampler"] == DEFAULTS["dgp"]["sampler"] == 2
    assert dgp.load_process(rundir.load_torch(run / rundir.DGP)).sampler == 2



SEGMENTS = {"dgp.space.name": "euclidean", "dgp.marginal.name": "segments", "dgp.marginal.segments": 4,
            "dgp.conditional.name": "same_segment", "dgp.negatives.name": "none", "encoder.normalize": "none",
            "loss.name": "gcl", "loss.basis": ["abs"]}
CONTRASTED = {"dgp.dim": 6, "dgp.space.name": "euclidean", "dgp.marginal.name": "gaussian_blocks",
              "dgp.conditional.name": "keep", "dgp.negatives.name": "marginal", "encoder.output_dim": 5,
              "dgp.views": {"name": "subsets", "latents": [["z0", "z1", "z2"], ["z0", "z1", "z3"]], "contrast": "all"},
              "loss.similarity": "l2", "loss.negatives": "independent", "loss.reduction": "logmeanexp"}


@pytest.mark.parametrize("extra, section, option, before, solver_reads", [
    (SEGMENTS, "loss", "x_term", None, lambda c: c.loss.x_term is None),
    (CONTRASTED, "dgp.views", "objective", "pairs", lambda c: not c.selection.joint),
])
def test_a_version_3_run_resumes_with_the_objective_it_began_with(tmp_path, monkeypatch, extra, section, option,
                                                                   before, solver_reads):
    """Version 4 changed two objectives' defaults (gcl's term of x alone, the joint objective over contrasted
    subsets): a run saved before resumes with the earlier value, written into its config."""
    import identifiable_cl.training as training

    monkeypatch.setattr(training, "draw_figures_if_possible", lambda run_dir: {})
    config = tiny_config(**{"train.steps": 10, "train.checkpoint_every": 10, **extra, f"{section}.{option}": before})
    Trainer.create(config, tmp_path / "run", progress=False).run()
    meta = rundir.read_json(tmp_path / "run" / rundir.META)
    (tmp_path / "run" / rundir.META).write_text(json.dumps({**meta, "schema_version": 3}))
    without_trained(tmp_path / "run")

    def node(tree):
        for part in section.split("."):
            tree = tree[part]
        return tree

    written = yaml.safe_load((tmp_path / "run" / rundir.CONFIG).read_text())
    del node(written)[option]
    (tmp_path / "run" / rundir.CONFIG).write_text(yaml.safe_dump(written, sort_keys=False))
    if section.startswith("dgp."):  # dgp.pt's config, and the fingerprint of it, as version 3 wrote them
        saved = rundir.load_torch(tmp_path / "run" / rundir.DGP)
        process = dgp.load_process(saved)
        config = copy.deepcopy(saved["config"])
        del node({"dgp": config})[option]
        header = canonical({"config": {k: v for k, v in config.items() if (k, v) != ("sampler", 1)},
                            "seed": process.seed})
        torch.save({**saved, "config": config, "fingerprint": process.fingerprint_of(header)},
                   tmp_path / "run" / rundir.DGP)
    assert not solver_reads(assemble(resolve(None, {**TINY, **extra})))  # today's default is another
    c = load_run(tmp_path / "run")
    assert node(c.config)[option] == before and solver_reads(c)
    if section.startswith("dgp."):  # the process the run resumes with has it too
        assert getattr(c.process.views, option) == before
    assert Trainer.resume(tmp_path / "run", {"train.steps": 20}, progress=False).run()["steps"] == 20
    assert node(yaml.safe_load((tmp_path / "run" / rundir.CONFIG).read_text()))[option] == before
