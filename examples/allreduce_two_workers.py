# examples/allreduce_two_workers.py: one worker of examples/jobs.json's job 1 (2 workers, a
# pool of 64 slots). Both workers run at the same time, each in its own process:
#   ina switch --jobs examples/jobs.json &
#   python examples/allreduce_two_workers.py 0 & python examples/allreduce_two_workers.py 1
import sys

import numpy as np

from ina.host.allreduce import Worker
from ina.host.transport import WorkerConfig

worker_id = int(sys.argv[1])
host, port = (sys.argv[2] if len(sys.argv) > 2 else "127.0.0.1:47000").rsplit(":", 1)
cfg = WorkerConfig(job_id=1, worker_id=worker_id, num_workers=2, switch=(host, int(port)),
                   bind=("127.0.0.1", 50000 + worker_id), pool_size=64, lanes=256)  # fmt: skip
grad = np.full(1000, worker_id + 1, np.float32)  # numpy array or torch tensor, any shape
with Worker(cfg) as w:
    total = w.allreduce(grad)  # 1 + 2 = 3 everywhere
    mean = w.allreduce(grad, average=True)  # 1.5
print(f"worker {worker_id}: sum {total[0]:g}, mean {mean[0]:g}")
