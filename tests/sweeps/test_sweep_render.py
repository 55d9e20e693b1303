"""``${args}`` and the other agent macros, rendered as a W&B agent renders them."""

import json

from identifiable_cl.config import parse_overrides
from identifiable_cl.sweeps.render import argument_forms, render_args, render_command

PARAMS = {
    "eval.nonlinear": False,
    "eval.in_sample": True,
    "encoder.widths": [32, 16],
    "wandb.name": "two words",
    "loss.tau": 0.1,
    "wandb.group": None,
    "seed": 3,
}


def test_args_use_python_str_of_each_value_in_order():
    assert render_args(PARAMS) == [
        "--eval.nonlinear=False",
        "--eval.in_sample=True",
        "--encoder.widths=[32, 16]",
        "--wandb.name=two words",
        "--loss.tau=0.1",
        "--wandb.group=None",
        "--seed=3",
    ]


def test_other_argument_forms():
    forms = argument_forms({"a.b": True, "c": False, "d": [1, 2], "e": "x y"})
    assert forms["args_no_boolean_flags"] == ["--a.b", "--d=[1, 2]", "--e=x y"]
    assert forms["args_no_hyphens"] == ["a.b=True", "c=False", "d=[1, 2]", "e=x y"]
    assert forms["args_no_equals"] == ["--a.b", "True", "--c", "False", "--d", "[1, 2]", "--e", "x y"]
    assert forms["args_append_hydra"][0] == "+a.b=True" and forms["args_override_hydra"][0] == "++a.b=True"
    assert forms["args_json"] == [json.dumps({"a.b": True, "c": False, "d": [1, 2], "e": "x y"})]


def test_icl_train_reads_rendered_args_back():
    """What the agent renders, ``icl train`` parses to the same values (None excepted: it reads back as 'None')."""
    values = {k: v for k, v in PARAMS.items() if v is not None}
    assert parse_overrides(render_args(values)) == values


def test_command_macros_and_envvar():
    command = ["${env}", "${interpreter}", "${program}", "--tag=${envvar:TAG}-${envvar:MISSING}", "${args}", 5, "${unknown}"]
    argv = render_command(command, {"seed": 1}, program="train.py", environ={"TAG": "exp"})
    assert argv == ["/usr/bin/env", "python", "train.py", "--tag=exp-MISSING", "--seed=1", "5"]


def test_args_json_file_macro():
    argv = render_command(["prog", "${args_json_file}"], {"seed": 1}, args_json_file="/tmp/x.json", environ={})
    assert argv == ["prog", "/tmp/x.json"]
