"""GetPreferredAllocation: which of the available devices a container should get.

The kubelet treats any error here as a failed admission, so this must never raise: one lost GPU
made NVIDIA's plugin reject every pod on the node (#2038). Unknown IDs, unhealthy devices and
missing topology only make the answer less aligned, never absent.

- Whole GPUs: the set (with `must_include`) whose pairwise link scores (`NodeGpus.links`) sum
  highest, ties to the lowest GPU indexes. Exhaustive while the number of candidate sets is
  small (C(8, k) <= 70), otherwise greedy growth then pairwise swaps until none helps. The
  topology comes in as data; NVIDIA re-reads it through NVML on every call (16-30 s, #774).
- Replicas (`<id>::<n>`), NVIDIA's policies: `distributed` takes, one at a time, a replica of
  the physical device with the fewest replicas in use (allocated elsewhere, in `must_include`
  or already picked here); `packed` takes one of the device with the most, filling it first.
  Ties go to the device picked least in this call (NVIDIA's v0.20 rule: with `G0::0, G0::1,
  G1::1` free and 2 wanted, one per GPU), then the lowest GPU index, MIG index, replica.
- MIG devices (unshared): GPU index, then MIG index order.

Pure: no I/O, no clock.
"""

import itertools
from collections.abc import Collection, Mapping, Sequence
from enum import StrEnum
from math import comb

from gpufleet.plugin.core.devices import device_order
from gpufleet.plugin.core.model import AdvertisedDevice

# Candidate sets scored exhaustively; beyond this the greedy search answers in well under 1 ms.
_EXHAUSTIVE_LIMIT = 2_000


class AllocationPolicy(StrEnum):
    """`--shared-devices-allocation-policy`."""

    DISTRIBUTED = "distributed"
    PACKED = "packed"


def preferred_allocation(
    available: Sequence[str],
    must_include: Sequence[str],
    size: int,
    devices: Mapping[str, AdvertisedDevice],
    links: Mapping[tuple[int, int], int],
    *,
    policy: AllocationPolicy,
    unhealthy: Collection[str] = (),
) -> tuple[str, ...]:
    """The IDs to allocate: `must_include` first, then the chosen ones.

    `devices` holds every device of the resource (allocated ones too: replica counting needs
    them). When `size` is at least the number available, everything available is returned
    (NVIDIA's shortcut, PR #460); the kubelet never asks for more. Unknown or unhealthy IDs
    are chosen only when nothing else fills the request, in the order the kubelet gave them.
    """
    must = list(dict.fromkeys(must_include))
    taken = set(must)
    pool = [i for i in dict.fromkeys(available) if i not in taken]
    need = size - len(must)
    if need >= len(pool):
        return (*must, *pool)
    if need <= 0:
        return tuple(must)
    usable = [devices[i] for i in pool if i in devices and i not in unhealthy]
    if len(usable) <= need:
        chosen = {d.id for d in usable}
        rest = [i for i in pool if i not in chosen]
        return (*must, *(d.id for d in usable), *rest[: need - len(usable)])
    if any(d.replica is not None for d in usable):
        return (*must, *_by_replicas(usable, need, devices, policy))
    if any(d.mig is not None for d in usable):
        return (*must, *(d.id for d in sorted(usable, key=device_order)[:need]))
    known_must = [devices[i] for i in must if i in devices]
    return (*must, *_aligned(usable, known_must, need, links))


def _aligned(
    candidates: list[AdvertisedDevice],
    must: list[AdvertisedDevice],
    need: int,
    links: Mapping[tuple[int, int], int],
) -> tuple[str, ...]:
    """The `need` whole GPUs that, with `must`, maximize the summed pairwise link score."""
    candidates = sorted(candidates, key=device_order)
    n = len(candidates)
    index = [d.gpu.index for d in candidates]
    pair = [[_link(links, index[a], index[b]) for b in range(n)] for a in range(n)]
    base = [sum(_link(links, index[a], m.gpu.index) for m in must) for a in range(n)]

    def score(picks: Sequence[int]) -> int:
        return sum(base[a] for a in picks) + sum(
            pair[a][b] for a, b in itertools.combinations(picks, 2)
        )

    if comb(n, need) <= _EXHAUSTIVE_LIMIT:
        # combinations() yields in lexicographic order and max() keeps the first best: the
        # lowest indexes win ties.
        best = max(itertools.combinations(range(n), need), key=score)
    else:
        best = _greedy(n, need, pair, base)
    return tuple(candidates[a].id for a in sorted(best))


def _greedy(n: int, need: int, pair: list[list[int]], base: list[int]) -> tuple[int, ...]:
    """Grow by best gain, then swap one in for one out while that strictly helps.

    Each swap raises the score, so the loop ends; `n` rounds bound it regardless.
    """
    chosen: list[int] = []
    gain = list(base)
    free = set(range(n))
    for _ in range(need):
        pick = max(sorted(free), key=lambda a: gain[a])
        chosen.append(pick)
        free.discard(pick)
        for a in range(n):
            gain[a] += pair[a][pick]
    for _ in range(n):
        best_delta, swap = 0, None
        for out in chosen:
            for into in sorted(free):
                delta = gain[into] - pair[into][out] - gain[out]
                if delta > best_delta:
                    best_delta, swap = delta, (out, into)
        if swap is None:
            break
        out, into = swap
        chosen[chosen.index(out)] = into
        free.discard(into)
        free.add(out)
        for a in range(n):
            gain[a] += pair[a][into] - pair[a][out]
    return tuple(chosen)


def _by_replicas(
    candidates: list[AdvertisedDevice],
    need: int,
    devices: Mapping[str, AdvertisedDevice],
    policy: AllocationPolicy,
) -> tuple[str, ...]:
    """NVIDIA's distributed/packed greedy over replicas, made deterministic.

    Works per physical device (GPU or MIG UUID) rather than per replica, so a step costs the
    number of devices, not of replicas (8 GPUs x 48 MPS clients is 384 replicas).
    """
    queues: dict[str, list[AdvertisedDevice]] = {}
    for device in sorted(candidates, key=device_order):
        queues.setdefault(device.base_id, []).append(device)
    total: dict[str, int] = {}
    for device in devices.values():
        total[device.base_id] = total.get(device.base_id, 0) + 1
    # In use = not offered as a candidate: allocated to other pods or in must_include.
    in_use = {base: total[base] - len(queue) for base, queue in queues.items()}
    sign = 1 if policy == AllocationPolicy.DISTRIBUTED else -1
    picked = dict.fromkeys(queues, 0)
    picks: list[str] = []
    for _ in range(need):
        # NVIDIA's tie-break: between equally used devices, the one picked least in this call.
        base = min(
            queues,
            key=lambda b: (sign * in_use[b], picked[b], device_order(queues[b][0])),
        )
        picks.append(queues[base].pop(0).id)
        in_use[base] += 1
        picked[base] += 1
        if not queues[base]:
            del queues[base]
    return tuple(picks)


def _link(links: Mapping[tuple[int, int], int], a: int, b: int) -> int:
    if a == b:
        return 0
    return links.get((a, b) if a < b else (b, a), 0)
