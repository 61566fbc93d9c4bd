"""Cluster recipes in examples/: valid shell and YAML, and only flags ticktensor train has."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys

import pytest
import yaml

from ticktensor.cli import build_parser

from .conftest import ROOT, build_store, cli_env

SBATCH = ROOT / "examples" / "slurm" / "train.sbatch"
PYTORCHJOB = ROOT / "examples" / "k8s" / "pytorchjob.yaml"


def train_flags() -> set[str]:
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    parser = sub.choices["train"]  # type: ignore[index]
    return {flag for action in parser._actions for flag in action.option_strings}


def test_sbatch_script_is_valid_bash_with_known_flags() -> None:
    bash = shutil.which("bash")
    assert bash is not None
    done = subprocess.run([bash, "-n", str(SBATCH)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    text = SBATCH.read_text()
    assert "#SBATCH --nodes=" in text
    for needed in ("--rdzv-backend=c10d", "--rdzv-endpoint=", "--max-restarts=", "srun"):
        assert needed in text
    train_part = text.split("ticktensor.cli train", 1)[1]
    used = set(re.findall(r"(?<![\w-])--[a-z][a-z-]*", train_part))
    assert used <= train_flags(), used - train_flags()


def test_pytorchjob_manifest_loads_and_runs_ticktensor_train() -> None:
    docs = list(yaml.safe_load_all(PYTORCHJOB.read_text()))
    assert len(docs) == 1
    job = docs[0]
    assert job["kind"] == "PyTorchJob"
    assert job["apiVersion"] == "kubeflow.org/v1"
    assert job["spec"]["elasticPolicy"]["rdzvBackend"] == "c10d"
    worker = job["spec"]["pytorchReplicaSpecs"]["Worker"]
    container = worker["template"]["spec"]["containers"][0]
    assert container["command"] == ["torchrun"]
    args = container["args"]
    assert args[:3] == ["-m", "ticktensor.cli", "train"]
    parsed = build_parser().parse_args(args[2:])
    assert parsed.command == "train"
    assert parsed.out.startswith("/runs/")
    mounts = {m["mountPath"] for m in container["volumeMounts"]}
    assert "/runs" in mounts


@pytest.mark.slow
def test_train_ddp_example_runs_in_one_process(tmp_path_factory: pytest.TempPathFactory) -> None:
    tmp = tmp_path_factory.mktemp("example")
    store = build_store(tmp / "store", rows=400)
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "train_ddp.py"), store, str(tmp / "run")],
        cwd=ROOT,
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    assert "done:" in done.stdout
