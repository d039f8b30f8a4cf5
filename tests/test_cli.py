"""The ``fdpu`` entry point: every subcommand is registered, has help, and parses."""

import pytest

import sw.cli


def test_every_command_module_registers():
    # build_parser imports every module named in COMMANDS: a missing one fails here.
    commands = sw.cli.build_parser()._subparsers._group_actions[0].choices
    for name in ("fdcsr", "layers", "verilog", "lint", "fpu-check", "synth", "run", "asm",
                 "disasm", "noc-bench", "rtl"):
        assert name in commands, f"fdpu {name} is not registered"


@pytest.mark.parametrize("name", sorted(sw.cli.build_parser()
                                        ._subparsers._group_actions[0].choices))
def test_help_of_each_command(name, capsys):
    with pytest.raises(SystemExit) as exc:
        sw.cli.main([name, "--help"])
    assert exc.value.code == 0
    assert "usage: fdpu" in capsys.readouterr().out


def test_unknown_command_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exc:
        sw.cli.main(["frobnicate"])
    assert exc.value.code == 2
    assert "invalid choice" in capsys.readouterr().err
