"""Helpers for tests that drive the ``fdpu`` command line through :func:`sw.cli`."""

import json

import sw.cli


def run(capsys, *argv):
    """Run ``fdpu ARGV...``; return ``(status, stdout, stderr)``."""
    status = sw.cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return status, out, err


def json_runs(capsys, tmp_path, flags, *argv):
    """Run ``fdpu ARGV... FLAG --json F`` once per flag of ``flags``; assert each succeeds and
    return ``[(record, stdout)]`` in the order of ``flags``."""
    out = []
    for flag in flags:
        path = tmp_path / f"{flag.lstrip('-')}.json"
        status, text, err = run(capsys, *argv, flag, "--json", path)
        assert status == 0, err
        out.append((json.loads(path.read_text()), text))
    return out


def call(capsys, *argv):
    """Run ``fdpu ARGV...`` as a fuzz case does; return ``(status, stderr)`` (an argparse exit,
    ``--help`` or a usage error, counts as its status)."""
    try:
        status = sw.cli.main([str(a) for a in argv])
    except SystemExit as exc:
        status = exc.code
    _, err = capsys.readouterr()
    return status, err


def assert_user_error(capsys, *argv, match):
    """Check that ``fdpu ARGV...`` fails with one ``fdpu: error:`` line containing ``match``."""
    status, out, err = run(capsys, *argv)
    assert status == 2, (out, err)
    assert err.startswith("fdpu: error: ") and err.count("\n") == 1, err
    assert match in err, err
    assert "Traceback" not in err
