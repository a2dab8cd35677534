"""MIG geometry of the 80 GB A100 and H100: how many instances of one profile fit on a GPU.

Pure data, NVIDIA's MIG user guide (one profile per GPU). The simulated NVML reports it as
each profile's `instanceCount`, and the capacity planner packs MIG replicas by it; the
planner must not import pynvml, so the table lives here rather than in the NVML models.
1g.20gb and 2g.20gb are memory-bound to 4 and 3; 4g.40gb leaves 3 compute slices that no
3g profile can use alongside it.
"""

INSTANCES_PER_GPU_80GB: dict[str, int] = {
    "1g.10gb": 7,
    "1g.20gb": 4,
    "2g.20gb": 3,
    "3g.40gb": 2,
    "4g.40gb": 1,
    "7g.80gb": 1,
}
