"""W&B tracking: mode and credentials, precedence of names, and a real offline run read back from its .wandb file."""

import json
import struct
import sys
from pathlib import Path

import pytest

from identifiable_cl.tracking import Tracker, open_tracker
from identifiable_cl.tracking.wandb import expand_lists, has_credentials, init_arguments, open_wandb, resolve_mode
from tests.tiny import TINY

BLOCK, HEADER = 32768, 7


def read_wandb_log(path: Path) -> list:
    """The records of a W&B transaction log: a 7-byte file header, then LevelDB-log chunks in 32 KiB blocks."""
    from wandb.proto import wandb_internal_pb2 as pb

    data = path.read_bytes()
    assert data[:4] == b":W&B"
    pos, pending, records = HEADER, b"", []
    while pos + HEADER <= len(data):
        if BLOCK - pos % BLOCK < HEADER:
            pos += BLOCK - pos % BLOCK
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + HEADER])
        chunk = data[pos + HEADER : pos + HEADER + length]
        pos += HEADER + length
        if kind == 1:
            records.append(chunk)
        elif kind == 2:
            pending = chunk
        elif kind == 3:
            pending += chunk
        elif kind == 4:
            records.append(pending + chunk)
    return [pb.Record.FromString(r) for r in records]


def logged(run_dir: Path) -> dict:
    """History rows by step, final summary, config and run record of the one offline run under ``run_dir``.

    Nested values (e.g. an image's fields) appear as dotted keys: ``figures/training._type``.
    """
    [path] = list((run_dir / "wandb").glob("offline-run-*/run-*.wandb"))
    history, summary, config, run = {}, {}, {}, None

    def key(item):
        return item.key or ".".join(item.nested_key)

    for record in read_wandb_log(path):
        kind = record.WhichOneof("record_type")
        if kind == "history":
            row = {key(i): json.loads(i.value_json) for i in record.history.item}
            history[row["_step"]] = {k: v for k, v in row.items() if not k.startswith("_")}
        elif kind == "summary":
            summary.update({key(i): json.loads(i.value_json) for i in record.summary.update})
        elif kind == "run":
            run = record.run
            config.update({key(i): json.loads(i.value_json) for i in record.run.config.update})
        elif kind == "config":
            config.update({key(i): json.loads(i.value_json) for i in record.config.update})
    return {"history": history, "summary": {k: v for k, v in summary.items() if not k.startswith("_")},
            "config": config, "run": run}


@pytest.fixture
def no_credentials(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("NETRC", str(tmp_path / "home" / ".netrc"))
    for name in ("WANDB_API_KEY", "WANDB_IDENTITY_TOKEN_FILE", "WANDB_BASE_URL", "WANDB_PROJECT", "WANDB_RUN_GROUP",
                 "WANDB_NAME", "WANDB_TAGS", "WANDB_SWEEP_ID", "WANDB_RUN_ID", "WANDB_SWEEP_PARAM_PATH"):
        monkeypatch.delenv(name, raising=False)


def test_credentials_from_env_or_netrc(tmp_path):
    netrc = tmp_path / "netrc"
    assert not has_credentials({"NETRC": str(netrc)})
    assert has_credentials({"NETRC": str(netrc), "WANDB_API_KEY": "x" * 40})
    netrc.write_text("machine example.org login user password secret\n")
    assert not has_credentials({"NETRC": str(netrc)})
    netrc.write_text("machine api.wandb.ai login user password " + "k" * 40 + "\n")
    assert has_credentials({"NETRC": str(netrc)})
    assert not has_credentials({"NETRC": str(netrc), "WANDB_BASE_URL": "https://wandb.example.org"})


def test_mode_precedence_and_offline_without_credentials(tmp_path):
    none = {"NETRC": str(tmp_path / "absent")}
    assert resolve_mode(None, none) == "offline"
    assert resolve_mode("online", none) == "offline"
    assert resolve_mode(None, {**none, "WANDB_API_KEY": "k"}) == "online"
    assert resolve_mode(None, {**none, "WANDB_MODE": "disabled"}) == "disabled"
    assert resolve_mode("offline", {**none, "WANDB_MODE": "online", "WANDB_API_KEY": "k"}) == "offline"
    with pytest.raises(ValueError, match="wandb.mode='loud'"):
        resolve_mode("loud", none)
    with pytest.raises(ValueError, match="WANDB_MODE='loud'"):
        resolve_mode(None, {**none, "WANDB_MODE": "loud"})


def test_names_from_config_else_env_else_defaults(tmp_path):
    run_dir = tmp_path / "20260101-run"
    env = {"NETRC": str(tmp_path / "absent")}
    config = {"seed": 0, "wandb": {"project": "identifiable-cl", "group": None, "name": None, "tags": [], "mode": None}}
    kwargs = init_arguments(config, run_dir, env)
    assert kwargs["project"] == "identifiable-cl" and kwargs["name"] == "20260101-run" and kwargs["mode"] == "offline"
    assert "group" not in kwargs and "tags" not in kwargs and kwargs["dir"] == str(run_dir)
    assert not {"entity", "job_type", "notes"} & set(kwargs)
    env.update(WANDB_PROJECT="p-env", WANDB_RUN_GROUP="g-env", WANDB_NAME="n-env", WANDB_TAGS="a,b")
    kwargs = init_arguments(config, run_dir, env)
    assert not {"project", "group", "name", "tags"} & set(kwargs), "W&B reads its own variables"
    config["wandb"].update(project="p", group="g", name="n", tags=["t"])
    kwargs = init_arguments(config, run_dir, env)
    assert (kwargs["project"], kwargs["group"], kwargs["name"], kwargs["tags"]) == ("p", "g", "n", ["t"])
    env.update(WANDB_ENTITY="e-env", WANDB_JOB_TYPE="j-env", WANDB_NOTES="notes-env")
    config["wandb"].update(entity="team", job_type="eval", notes="a longer description")
    kwargs = init_arguments(config, run_dir, env)
    assert (kwargs["entity"], kwargs["job_type"], kwargs["notes"]) == ("team", "eval", "a longer description")


def test_config_is_logged_once_as_flat_dotted_keys(tmp_path):
    from identifiable_cl.config import flat_keys
    from identifiable_cl.components import load_config

    config = load_config(None, {"loss.tau": 0.3})
    kwargs = init_arguments(config, tmp_path / "run", {"NETRC": str(tmp_path / "absent")})
    assert kwargs["config"] == flat_keys(config) and kwargs["config"]["loss.tau"] == 0.3
    assert not any(isinstance(v, dict) and v for v in kwargs["config"].values()), "no nested duplicate"
    assert not {"loss", "dgp", "train", "wandb"} & set(kwargs["config"])


def test_wandb_is_silent_unless_verbose(tmp_path):
    env = {"NETRC": str(tmp_path / "absent")}
    assert init_arguments({"wandb": {}}, tmp_path / "run", env)["settings"] == {"silent": True, "console": "off"}
    assert "settings" not in init_arguments({"wandb": {"verbose": True}}, tmp_path / "run", env)


def test_entity_job_type_and_notes_reach_wandb_init(tmp_path, monkeypatch, no_credentials):
    import wandb

    seen = {}

    class FakeRun:
        pass

    def fake_init(**kwargs):
        seen.update(kwargs)
        return FakeRun()

    monkeypatch.setattr(wandb, "init", fake_init)
    monkeypatch.setenv("WANDB_MODE", "offline")
    config = {"seed": 1, "wandb": {"entity": "team", "job_type": "train", "notes": "first try", "verbose": False}}
    tracker = open_wandb(config, tmp_path / "run")
    assert isinstance(tracker.run, FakeRun)
    assert (seen["entity"], seen["job_type"], seen["notes"]) == ("team", "train", "first try")
    assert seen["config"] == {"seed": 1, "wandb.entity": "team", "wandb.job_type": "train",
                              "wandb.notes": "first try", "wandb.verbose": False}
    assert seen["settings"] == {"silent": True, "console": "off"} and seen["mode"] == "offline"


def test_lists_become_one_scalar_per_entry():
    assert expand_lists({"loss": 1.0, "lambda_hat": [2.0, 3.0], "tags": ["a"], "empty": []}) == {
        "loss": 1.0, "lambda_hat/0": 2.0, "lambda_hat/1": 3.0, "tags": ["a"], "empty": []
    }


def test_disabled_or_missing_wandb_gives_no_tracker(tmp_path, monkeypatch, no_credentials):
    monkeypatch.setenv("WANDB_MODE", "disabled")
    assert open_wandb({"wandb": {}}, tmp_path / "run") is None
    assert type(open_tracker({"wandb": {}}, tmp_path / "run")) is Tracker
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setitem(sys.modules, "wandb", None)
    assert open_wandb({"wandb": {}}, tmp_path / "run") is None
    assert not (tmp_path / "run").exists()


def test_offline_run_logs_records_figures_summary_and_sweep_parameters(tmp_path, monkeypatch, no_credentials):
    import wandb

    from identifiable_cl.plots import training_figure
    from identifiable_cl.sweeps.local import write_params

    monkeypatch.setenv("WANDB_MODE", "online")  # no credentials: must fall back to offline, without a prompt
    params = tmp_path / "params.yaml"
    write_params(params, {"loss.tau": 0.3, "seed": 2})
    monkeypatch.setenv("WANDB_SWEEP_ID", "sweep123")
    monkeypatch.setenv("WANDB_RUN_ID", "abcd1234")
    monkeypatch.setenv("WANDB_SWEEP_PARAM_PATH", str(params))
    wandb.teardown()  # W&B reads these variables when it is set up: forget a set-up by an earlier test
    run_dir = tmp_path / "run"
    config = {"seed": 2, "loss": {"name": "infonce", "tau": 0.3}, "wandb": {"project": "identifiable-cl", "tags": ["t1"]}}
    tracker = open_wandb(config, run_dir)
    assert tracker is not None
    records = [{"step": 10, "loss": 1.5}, {"step": 20, "loss": 1.25, "r2_linear": 0.5, "lambda_learned": [4.0, 20.0]}]
    for record in records:
        tracker.log(record["step"], record)
    png = run_dir / "training.png"
    training_figure(records).savefig(png)
    tracker.log_figures(20, {"training": png})
    summary = {"r2_linear": 0.5, "lambda_learned": [4.0, 20.0], "steps": 20}
    tracker.finish(summary)
    wandb.teardown()  # the service writes the transaction log out when it stops (at exit in a real run)

    got = logged(run_dir)
    assert got["run"].run_id == "abcd1234" and got["run"].sweep_id == "sweep123"
    assert list(got["run"].tags) == ["t1"]
    assert got["config"]["loss.tau"] == 0.3 and got["config"]["loss.name"] == "infonce"
    assert "loss" not in got["config"] and "wandb" not in got["config"], "the config is logged once, flat"
    assert got["history"][10] == {"loss": 1.5}
    row = got["history"][20]
    assert row["loss"] == 1.25 and row["r2_linear"] == 0.5 and (row["lambda_learned/0"], row["lambda_learned/1"]) == (4.0, 20.0)
    assert row["figures/training._type"] == "image-file" and row["figures/training.format"] == "png"
    assert {k: got["summary"][k] for k in summary} == summary




def test_trainer_run_logs_exactly_its_own_files(tmp_path, monkeypatch, no_credentials):
    """A real offline run: every metrics.jsonl record, the summary and the config are in the .wandb file."""
    import wandb

    from identifiable_cl import rundir
    from identifiable_cl.config import flat_keys
    from identifiable_cl.components import load_config
    from identifiable_cl.training import Trainer

    monkeypatch.setenv("WANDB_MODE", "offline")
    config = load_config(None, {**TINY, "train.log_every": 5, "wandb.tags": ["tracking-test"]})
    run_dir = tmp_path / "run"
    Trainer.create(config, run_dir, progress=False).run()
    wandb.teardown()

    got = logged(run_dir)
    records = rundir.read_metrics(run_dir)
    assert [r["step"] for r in records] == [5, 10, 15, 20]
    for record in records:
        row = got["history"][record["step"]]
        expected = expand_lists({k: v for k, v in record.items() if k != "step"})
        assert {k: row.get(k) for k in expected} == expected, record["step"]
    summary = rundir.read_json(run_dir / rundir.SUMMARY)
    assert {k: got["summary"].get(k) for k in summary} == summary
    flat = json.loads(json.dumps(flat_keys(config)))
    assert {k: got["config"].get(k) for k in flat} == flat
    sections = set(config) - set(flat)
    assert sections and not sections & set(got["config"]), "no nested duplicate of a section"
    assert list(got["run"].tags) == ["tracking-test"] and got["run"].display_name == "run"




@pytest.mark.integration
def test_a_local_sweep_is_synced_by_one_glob(tmp_path, monkeypatch, no_credentials):
    """The ``wandb sync OUT/SWEEP/*/run/wandb/offline-run-*`` of docs/sweeps-and-clusters.md names every run once,
    named by its parameters."""
    import glob
    import os

    import yaml

    from identifiable_cl.sweeps.search import run_sweep
    from identifiable_cl.sweeps.spec import load_sweep

    monkeypatch.setenv("ICL_CACHE", os.environ.get("ICL_CACHE") or str(Path.home() / ".cache" / "identifiable_cl"))
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.delenv("WANDB_ENTITY", raising=False)
    config = tmp_path / "tiny.yaml"
    config.write_text(yaml.safe_dump(TINY))
    path = tmp_path / "tiny-sweep.yaml"
    path.write_text(yaml.safe_dump({
        "name": "tiny", "method": "grid",
        "command": ["${env}", sys.executable, "-m", "identifiable_cl.cli", "train", str(config), "--quiet", "${args}"],
        "parameters": {"loss.tau": {"values": [0.1, 0.5]}, "seed": {"value": 3}},
    }))
    out = tmp_path / "out"
    outcomes = run_sweep(load_sweep(path), out, workers=2, echo=lambda line: None)
    assert [o.state for o in outcomes] == ["finished"] * 2, [(o.run.folder / "stdout.log").read_text() for o in outcomes]

    found = sorted(glob.glob(f"{out}/tiny/*/run/wandb/offline-run-*"))
    assert len(found) == 2 and {Path(f).parents[2].name for f in found} == {o.run.run_id for o in outcomes}
    by_id = {Path(f).name.rsplit("-", 1)[1]: Path(f) for f in found}
    assert set(by_id) == {o.run.wandb_id for o in outcomes}
    for o in outcomes:
        got = logged(o.run.folder / "run")
        assert got["run"].run_id == o.run.wandb_id
        assert got["run"].display_name == f"loss.tau={o.run.params['loss.tau']} seed=3"
        assert got["run"].run_group == "tiny"
        assert got["config"]["loss.tau"] == o.run.params["loss.tau"] and "loss" not in got["config"]
        assert "wandb:" not in (o.run.folder / "stdout.log").read_text()


def test_a_run_resumed_twice_is_one_wandb_run(tmp_path, monkeypatch, no_credentials, capsys):
    """The W&B run id is chosen with the run directory and kept in meta.json: each resume continues that W&B run
    (offline, one offline-run-*-<id> piece per stretch), says so on stderr, and a copied run directory says that
    the earlier pieces are elsewhere."""
    import shutil

    import wandb

    from identifiable_cl import rundir
    from identifiable_cl.tracking.wandb import piece_of
    from identifiable_cl.components import load_config
    from identifiable_cl.training import Trainer

    monkeypatch.setenv("WANDB_MODE", "offline")
    run_dir = tmp_path / "run"
    Trainer.create(load_config(None, {**TINY, "train.steps": 10, "train.figures": False}), run_dir, progress=False).run()
    run_id = rundir.read_meta(run_dir)["wandb_id"]
    for steps in (20, 30):
        Trainer.resume(run_dir, {"train.steps": steps}, progress=False).run()
    wandb.teardown()
    pieces = sorted(p.name for p in (run_dir / "wandb").glob("offline-run-*"))
    assert len(pieces) == 3 and all(piece_of(p, run_id) for p in pieces)  # W&B adds -1, -2 within one second
    assert not piece_of(pieces[0], run_id + "x") and not piece_of(pieces[0].replace("offline-", "late-"), run_id)
    said = capsys.readouterr().err
    assert f"W&B: continuing the run's W&B run {run_id} from step 10 (1 earlier piece in" in said
    assert f"W&B: continuing the run's W&B run {run_id} from step 20 (2 earlier pieces in" in said
    copy = tmp_path / "copy"
    shutil.copytree(run_dir, copy, ignore=shutil.ignore_patterns("wandb"))
    monkeypatch.setenv("WANDB_RUN_ID", "other1")
    Trainer.resume(copy, {"train.steps": 40}, progress=False).run()
    wandb.teardown()
    said = capsys.readouterr().err
    assert (f"W&B: continuing the run's W&B run {run_id} from step 30; none of its earlier files is in "
            f"{copy / 'wandb'}") in said and "WANDB_RUN_ID=other1 is not used" in said
    assert [piece_of(p.name, run_id) for p in (copy / "wandb").glob("offline-run-*")] == [True]


def test_a_new_run_takes_the_agent_s_run_id_and_packed_runs_their_own(tmp_path, monkeypatch, no_credentials):
    from identifiable_cl import rundir
    from identifiable_cl.cli.train import train_pack
    from identifiable_cl.components import load_config
    from identifiable_cl.training import Trainer

    monkeypatch.setenv("WANDB_MODE", "disabled")
    monkeypatch.setenv("WANDB_RUN_ID", "agent42")
    Trainer.create(load_config(None, {**TINY, "train.steps": 2}), tmp_path / "one", progress=False).run()
    assert rundir.read_meta(tmp_path / "one")["wandb_id"] == "agent42"
    specs = [(load_config(None, {**TINY, "train.steps": 2, "seed": s}), tmp_path / f"p{s}", f"sweep{s}", None)
             for s in (0, 1)]
    train_pack(specs)
    assert [rundir.read_meta(tmp_path / f"p{s}")["wandb_id"] for s in (0, 1)] == ["sweep0", "sweep1"]
    monkeypatch.delenv("WANDB_RUN_ID")
    Trainer.create(load_config(None, {**TINY, "train.steps": 2}), tmp_path / "two", progress=False).run()
    fresh = rundir.read_meta(tmp_path / "two")["wandb_id"]
    assert rundir.WANDB_ID.fullmatch(fresh) and len(fresh) == 8 and fresh != "agent42"
