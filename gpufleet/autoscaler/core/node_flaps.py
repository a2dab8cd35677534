"""Node flaps: a node given back and taken back within the scale-down window.

Issue 17. On steady traffic with heavy-tailed prompts the need wanders across a node
boundary: a quiet minute sizes the fleet a node (or two) smaller, and the next queue waits
take the node back a minute or two later. The node given back is billed through the
cluster's idle time before it goes (Karpenter's consolidateAfter), so the release saved
nothing, and the replicas taken back served nobody for a cold start. HPA, which holds a
duty-cycle target, held such a fleet steadily, and was cheaper at equal attainment.

The evidence that a release does not stick is a release that did not: a scale-up past the
node count a release gave up, within `window` seconds of it (the policy's scale-down
window). After such a flap, no node is given back for `hold` seconds (the half hour of
the forecast's peak memory): the traffic has shown that this fleet's nodes come back. A
crowd's fleet is released as before, because nothing takes its nodes back. Counts are in
nodes (whole-GPU replicas per node known), not replicas: a release within a node changes
no bill. Pure: `note(state, ...) -> state`, `holds(state, ...) -> bool`.
"""

import math
from dataclasses import dataclass, replace


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeFlaps:
    # (when, nodes before) of the releases within the window, oldest first.
    releases: tuple[tuple[float, int], ...] = ()
    flapped: float = -math.inf  # the newest scale-up that took a released node back


def holds(state: NodeFlaps, *, now: float, hold: float) -> bool:
    """True while no node may be given back: a flap within the last `hold` seconds."""
    return now - state.flapped < hold


def note(state: NodeFlaps, *, now: float, before: int, after: int, window: float) -> NodeFlaps:
    """Fold one decision that took the fleet from `before` to `after` nodes' worth of
    replicas; releases older than `window` seconds are forgotten."""
    releases = state.releases
    flapped = state.flapped
    if after < before:
        releases += ((now, before),)
    elif after > before and any(n > before for t, n in releases if now - t < window):
        flapped = now
    releases = tuple((t, n) for t, n in releases if now - t < window)
    if releases == state.releases and flapped == state.flapped:
        return state
    return replace(state, releases=releases, flapped=flapped)
