"""MIG geometry: how many instances of one profile fit on an 80 GB A100 or H100, and what
part of its GPU an instance is.

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

# Compute slices of a whole GPU: 7 on A100, H100, H200 and Blackwell; 4 on the A30, whose
# profiles (NVIDIA's MIG user guide) are only these.
_A30_PROFILES = frozenset({"1g.6gb", "2g.12gb", "4g.24gb"})
_A30_SLICES = 4
_SLICES = 7


def mig_compute_fraction(profile: str) -> float:
    """The part of its GPU's compute a MIG profile holds, from NVIDIA's profile name
    (`<slices>g.<memory>gb`, optionally `+me`): 1g.10gb -> 1/7, 2g.12gb (A30) -> 2/4.
    A name that does not parse counts as one slice, never 0, so its share stays visible."""
    base = profile.split("+", 1)[0]
    slices = base.partition("g.")[0]
    if not slices.isdigit() or int(slices) == 0:
        return 1.0 / _SLICES
    total = _A30_SLICES if base in _A30_PROFILES else _SLICES
    return min(1.0, int(slices) / total)
