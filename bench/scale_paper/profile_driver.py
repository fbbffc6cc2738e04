"""cProfile of the driver over an 8-trial copy study (measure.py's driver half, SQLite,
SIMULATED device): where the driver's own time goes. Prints the profile; committed as
driver_profile.txt."""

import cProfile
import io
import pstats
import sys
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))
sys.path.insert(0, str(HERE))
import measure as m  # noqa: E402

from tsopt.core.problem import Problem  # noqa: E402

if __name__ == "__main__":
    st = m.Statements()
    work = Path("/tmp/scale_prof")
    work.mkdir(exist_ok=True)
    pr = cProfile.Profile()
    pr.enable()
    row = m.driver_half("copy", Problem.of("copy", "fp16", rows=4096, cols=4096), 8,
                        f"sqlite:///{work}/p-{uuid.uuid4().hex[:5]}.db", work, st)
    pr.disable()
    print({k: row[k] for k in ("trials", "built", "loop")})
    for order, rows in (("tottime", 25), ("cumulative", 45)):
        text = io.StringIO()
        pstats.Stats(pr, stream=text).sort_stats(order).print_stats(rows)
        print(text.getvalue())
