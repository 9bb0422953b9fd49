# examples/simulate_a_training_step.py: one data-parallel step of ResNet-50 on 64 A100s,
# backward overlapped with the gradients' allreduce, through the switch (INA) and as a ring.
# Simulated time: the same answer on every machine, in seconds of wall time.
#   python examples/simulate_a_training_step.py
from ina.sim.network import NetworkSpec, parse_link
from ina.sim.step import CommConfig, shape_of, simulate
from ina.workload import zoo
from ina.workload.devices import device, layer_times
from ina.workload.layers import PRECISIONS

work = zoo.build("resnet50", batch_size=64, precision="bf16")  # on the meta device: no weights
times = layer_times(work, device("a100"))  # each layer's time from the A100's data sheet
shape = shape_of(work, times, PRECISIONS["bf16"])
link = parse_link(rate="100G", delay="1us")
spec = NetworkSpec(workers=64, up=link, down=link, timing_only=True)  # 64 alike workers

for algorithm in ("ina", "ring"):
    r = simulate(shape, spec, steps=2, comm=CommConfig(algorithm, bytes_per_value=2))
    step = r["steps"][-1]
    print(f"{algorithm:>4}: {step['iteration_s'] * 1e3:.2f} ms per step, "
          f"{step['exposed_comm_s'] * 1e3:.2f} ms of it communication not hidden by backward")
