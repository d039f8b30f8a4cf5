"""The ``fdpu`` entry point: every subcommand is registered, has help, and parses."""

import pytest

import sw.cli


def test_every_command_module_registers():
    parser = sw.cli.build_parser()
    commands = parser._subparsers._group_actions[0].choices
    assert len(commands) >= len(sw.cli.COMMANDS)
    for name, sub in commands.items():
        assert sub.get_default("func") is not None, f"fdpu {name} sets no func"


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
