"""pyproject.toml and environment.yml list the same dependencies; the CLI is installed."""
from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def env_pip_requirements() -> list[str]:
    lines = (ROOT / "environment.yml").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == "- pip:")
    reqs = []
    for line in lines[start + 1:]:
        s = line.strip()
        if s.startswith("#") or not s:
            continue
        if not s.startswith("- "):
            break
        reqs.append(s[2:])
    return reqs


def test_environment_yml_matches_pyproject():
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = list(meta["dependencies"])
    for extra in meta["optional-dependencies"].values():
        declared += extra
    assert sorted(env_pip_requirements()) == sorted(declared)


def test_console_script_runs():
    out = subprocess.run([sys.executable, "-m", "peagle_lab.cli", "--help"], capture_output=True, text=True)
    assert out.returncode == 0 and "demo" in out.stdout and "fetch" in out.stdout


def test_cli_bad_input_is_one_clear_line():
    out = subprocess.run([sys.executable, "-m", "peagle_lab.cli", "demo", "--model", "/no/such/model"],
                         capture_output=True, text=True)
    assert out.returncode == 2
    assert "error: /no/such/model: no such model file or folder" in out.stderr
    assert "Traceback" not in out.stderr


@pytest.mark.parametrize("command, prog", [("soak", "scripts/bench/soak.py"), ("report", "peagle_lab.bench.report"),
                                           ("depth", "peagle_lab.bench.depth"),
                                           ("train-report", "peagle_lab.train.report")])
def test_every_tool_is_a_subcommand_that_passes_its_flags_on(command, prog, capsys):
    from peagle_lab.cli import main

    with pytest.raises(SystemExit) as e:
        main([command, "--help"])
    assert e.value.code == 0 and prog in capsys.readouterr().out


def test_unknown_flags_of_a_regular_command_are_refused(capsys):
    from peagle_lab.cli import main

    with pytest.raises(SystemExit) as e:
        main(["demo", "--bogus"])
    assert e.value.code == 2 and "unrecognized arguments: --bogus" in capsys.readouterr().err
