"""A stand-in for ``icl train`` in the sweep tests: fast, and its metrics are known in closed form.

``fake_train.py train --key=value ... --run-dir DIR`` writes ``DIR/config.yaml``
(the overrides, nested), ``DIR/summary.json`` with ``r2_linear = 0.9 + 0.01·seed``
and ``mcc_pearson = loss.tau + 0.1·seed``, and ``DIR/env.json`` (its arguments,
the W&B and CUDA variables it saw, start and end times). It sleeps
``FAKE_SLEEP`` seconds first and fails with exit code 3 when ``seed`` is 13, and with 130 (as an
``icl train`` stopped by a signal) when ``seed`` is 130. With ``FAKE_EVALS=k``
it first appends k records ``{"step": i, "mcc_pearson": loss.tau + 0.001·i}`` to
``DIR/metrics.jsonl``, one every ``FAKE_EVAL_S`` seconds (SIGINT then ends it with Python's
KeyboardInterrupt, exit code 1).
"""

import json
import os
import sys
import time
from pathlib import Path

import yaml

SEEN = ("WANDB_SWEEP_ID", "WANDB_RUN_ID", "WANDB_SWEEP_PARAM_PATH", "WANDB_MODE", "WANDB_DIR", "WANDB_PROJECT",
        "WANDB_RUN_GROUP", "WANDB_NAME", "CUDA_VISIBLE_DEVICES")


def main(argv: list[str]) -> int:
    started = time.time()
    assert argv[0] == "train", argv
    params, run_dir, rest = {}, None, argv[1:]
    while rest:
        word = rest.pop(0)
        if word == "--run-dir":
            run_dir = Path(rest.pop(0))
            continue
        key, _, value = word[2:].partition("=")
        params[key] = yaml.safe_load(value)
    time.sleep(float(os.environ.get("FAKE_SLEEP", "0")))
    print(f"training with {params}")
    if params.get("seed") == 13:
        print("deliberate failure for seed 13", file=sys.stderr)
        return 3
    if params.get("seed") == 130:
        print("stopped by a signal for seed 130", file=sys.stderr)
        return 130
    run_dir.mkdir(parents=True)
    for step in range(1, int(os.environ.get("FAKE_EVALS", "0")) + 1):  # an evaluation every FAKE_EVAL_S seconds
        with open(run_dir / "metrics.jsonl", "a") as f:
            f.write(json.dumps({"step": step, "mcc_pearson": params.get("loss.tau", 0.0) + 0.001 * step}) + "\n")
        time.sleep(float(os.environ.get("FAKE_EVAL_S", "0.2")))
    config: dict = {}
    for key, value in params.items():
        node = config
        *parents, leaf = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    (run_dir / "config.yaml").write_text(yaml.safe_dump(config))
    seed, tau = params.get("seed", 0), params.get("loss.tau", 0.0)
    summary = {"r2_linear": 0.9 + 0.01 * seed, "mcc_pearson": tau + 0.1 * seed, "seed": seed}
    (run_dir / "summary.json").write_text(json.dumps(summary))
    seen = {name: os.environ.get(name) for name in SEEN}
    (run_dir / "env.json").write_text(json.dumps({"argv": argv, "env": seen, "started": started, "ended": time.time()}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
