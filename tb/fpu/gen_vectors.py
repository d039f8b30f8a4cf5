"""Write the checked-in TestFloat-format binary16 vectors (``tests/data/f16_*.txt``).

The expected results and exception flags come from Berkeley SoftFloat (``softfloatpy``,
round-to-nearest-even), independent of :mod:`sw.spec.fp16`; the operands are edge classes, exact
cancellations and random bits from :func:`tb.fpu.model.random_operands`.  Run it again only
to change the files::

    python -m tb.fpu.gen_vectors tests/data
"""

import sys
from pathlib import Path

import numpy as np

from sw.models.testfloat import write_vectors
from tb.fpu import model

#: TestFloat function name, our op name and case count of each file.
FILES = (("f16_mulAdd", "fma", 3000), ("f16_mul", "mul", 1000), ("f16_add", "add", 1000))


def softfloat_cases(op, lanes):
    """Return (results, flags) of SoftFloat for ``op`` on the operand lanes."""
    import softfloatpy as sf
    sf.set_rounding_mode(sf.RoundingMode.NEAR_EVEN)
    fn = {"fma": sf.f16_mul_add, "mul": sf.f16_mul, "add": sf.f16_add}[op]
    results, flags = [], []
    for xs in zip(*lanes):
        sf.set_exception_flags(0)
        r = fn(*(sf.Float16.from_bytes(int(x).to_bytes(2, "big")) for x in xs))
        results.append(int.from_bytes(r.to_bytes(), "big"))
        flags.append(int(sf.get_exception_flags()))
    return np.array(results, dtype=np.uint16), np.array(flags, dtype=np.uint8)


def main(folder):
    """Write every file of :data:`FILES` into ``folder``."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for index, (name, op, count) in enumerate(FILES):
        rng = np.random.default_rng([2024, index])
        lanes = model.random_operands(op, count, rng)
        results, flags = softfloat_cases(op, lanes)
        write_vectors(folder / f"{name}.txt", lanes, results, flags)
        print(f"wrote {folder / f'{name}.txt'}: {count} cases")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/data")
