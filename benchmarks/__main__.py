"""``python -m benchmarks [--quick] [--threads N] [--only W1,W3] [--json PATH]``.

Thread counts must be fixed before numpy loads its BLAS, so this sets them first.
"""

import os
import sys


def _threads_from_argv(argv: list[str]) -> int:
    for i, arg in enumerate(argv):
        if arg == "--threads" and i + 1 < len(argv):
            return int(argv[i + 1])
        if arg.startswith("--threads="):
            return int(arg.split("=", 1)[1])
    return 1


_n = str(_threads_from_argv(sys.argv[1:]))
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = _n

from benchmarks.run import main  # noqa: E402  (after the thread settings)

if __name__ == "__main__":
    sys.exit(main())
