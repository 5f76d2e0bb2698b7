"""The one helper that points a printed command at the cluster it was printed for
(migrator/cli/commandline.py): what it takes from the invoked command line, what it adds to a
command, and what it leaves alone."""

from __future__ import annotations

import shlex

import pytest

from migrator.cli.commandline import Selection, command, complete, completed


@pytest.mark.parametrize("argv, expected", [
    (["dcgm-migrate", "status"], Selection()),
    (["dcgm-migrate", "status", "--kubeconfig", "/k", "--context", "prod", "-n", "ns"],
     Selection("/k", "prod", "ns")),
    (["dcgm-migrate", "apply", "--phase", "3", "--yes", "--kubeconfig=/k", "--namespace=ns"],
     Selection("/k", None, "ns")),
    (["dcgm-migrate", "verify", "-nns", "--context", "a b"], Selection(None, "a b", "ns")),
    (["dcgm-migrate", "verify", "-n", "x", "-n", "y"], Selection(None, None, "y")),  # click's
])
def test_the_selection_is_what_the_command_line_gave(argv: list[str],
                                                     expected: Selection) -> None:
    assert Selection.of(argv) == expected


SEL = Selection("/home/o n/.kube/config", "prod", "nvidia-gpu-operator")


def test_a_command_gets_the_options_it_lacks_shell_quoted() -> None:
    done = command(["dcgm-migrate", "apply", "--phase", "3"], SEL)
    assert done == ("dcgm-migrate apply --phase 3 --kubeconfig '/home/o n/.kube/config' "
                    "--context prod -n nvidia-gpu-operator")
    assert shlex.split(done)[-6:] == ["--kubeconfig", "/home/o n/.kube/config", "--context",
                                      "prod", "-n", "nvidia-gpu-operator"]
    # a command's own namespace wins (a fix may name the right one on purpose)
    assert command(["dcgm-migrate", "status", "-n", "gpu-operator"], SEL) == (
        "dcgm-migrate status -n gpu-operator --kubeconfig '/home/o n/.kube/config' "
        "--context prod")
    assert command(["kubectl", "-n", "gpu-operator", "describe", "pod", "p"], SEL) == (
        "kubectl -n gpu-operator describe pod p --kubeconfig '/home/o n/.kube/config' "
        "--context prod")
    assert command(["dcgm-migrate", "status"], Selection()) == "dcgm-migrate status"


def test_complete_touches_only_commands_in_backticks() -> None:
    text = ("run `dcgm-migrate apply --phase 2` (and keep `dcgm-migrate guard` running); "
            "pass `--timeout 20m`; label `nvidia.com/gpu-operator.dcgm=true`; "
            "`dcgm-migrate --version`; kubectl get pods")
    done = complete(text, Selection(None, "prod"))
    assert done == ("run `dcgm-migrate apply --phase 2 --context prod` (and keep "
                    "`dcgm-migrate guard --context prod` running); pass `--timeout 20m`; label "
                    "`nvidia.com/gpu-operator.dcgm=true`; `dcgm-migrate --version`; kubectl get "
                    "pods")
    assert complete(done, Selection(None, "prod")) == done  # completing twice adds nothing
    assert complete(text, Selection()) == text


def test_a_document_is_completed_in_every_string() -> None:
    doc = {"verdict": {"checks": [{"fix": "run `dcgm-migrate apply --phase 1`", "ok": False}]},
           "warnings": ["`kubectl get svc`"], "writes": 3}
    assert completed(doc, Selection("/k")) == {
        "verdict": {"checks": [{"fix": "run `dcgm-migrate apply --phase 1 --kubeconfig /k`",
                                "ok": False}]},
        "warnings": ["`kubectl get svc --kubeconfig /k`"], "writes": 3}
