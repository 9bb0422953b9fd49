"""torchrun, quiet about failures the ranks have already explained.

`ina train` launches its ranks with ``python -m ina.train.torchrun`` and torchrun's own
arguments. When a rank fails, it has printed one line saying why (and left its traceback in
``error_rank{R}.txt``), and `ina train` prints the summary; torchrun's `ChildFailedError`
report, a traceback of the launcher plus a table per rank, would only bury that line. So a
rank that exited with status 1 (our ranks' way of failing) is left unreported here, and any
other death (a signal, a crash before our handler ran) gets one line of its own.
"""

from __future__ import annotations

import logging
import signal
import sys


def _death(exitcode: int) -> str:
    if exitcode < 0:
        try:
            return f"killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"killed by signal {-exitcode}"
    return f"exited with status {exitcode}"


def main(argv: list[str] | None = None) -> int:
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import main as torchrun_main

    # the agent logs the first failure at ERROR before raising: the same news, a 4th time
    logging.getLogger("torch.distributed.elastic.multiprocessing.api").setLevel(logging.CRITICAL)
    # and on SIGTERM from `ina train` (Ctrl-C), "Received ... death signal, shutting down"
    logging.getLogger("torch.distributed.elastic.agent.server.api").setLevel(logging.ERROR)
    try:
        torchrun_main(argv)
    except ChildFailedError as e:
        for rank, failure in sorted(e.failures.items()):
            if failure.exitcode != 1:
                print(f"ina train: rank {rank} {_death(failure.exitcode)}", file=sys.stderr)
        return 1
    except SignalException as e:  # `ina train` stopping us (Ctrl-C): it says so, in one line
        return 128 + int(e.sigval)
    return 0


if __name__ == "__main__":
    sys.exit(main())
