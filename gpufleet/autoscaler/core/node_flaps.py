"""Node flaps: a node given back and taken back within the scale-down window.

Issue 17. On steady traffic with heavy-tailed prompts the need wanders across a node
boundary: a quiet minute sizes the fleet a node (or two) smaller, and the next queue waits
take the node back a minute or two later. The node given back is billed through the
cluster's idle time before it goes (Karpenter's consolidateAfter), so the release saved
nothing, and the replicas taken back served nobody for a cold start. HPA, which holds a
duty-cycle target, held such a fleet steadily, and was cheaper at equal attainment.

The evidence that a release does not stick is a release that did not: a scale-up past the
node count a release gave up, within `window` seconds of it (the policy's scale-down
window). After such a flap, the nodes it took back are not given back for `hold` seconds
(the half hour of the forecast's peak memory): the traffic has shown that they come back.
Only those: nodes a later crowd adds above them are released as before, because nothing
has taken them back (a flap before a crowd held the crowd's whole fleet for the rest of
the half hour, 2.6x the replicas on mix x4). Counts are in nodes (whole-GPU replicas per
node known), not replicas: a release within a node changes no bill. Pure:
`note(state, ...) -> state`, `held_nodes(state, ...) -> int`.
"""

import math
from dataclasses import dataclass, replace


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeFlaps:
    # (when, nodes before) of the releases within the window, oldest first.
    releases: tuple[tuple[float, int], ...] = ()
    flapped: float = -math.inf  # the newest scale-up that took a released node back
    level: int = 0  # the nodes it took back to


def held_nodes(state: NodeFlaps, *, now: float, hold: float) -> int:
    """The nodes no release may go below: the newest flap's within `hold` seconds of it,
    else 0."""
    return state.level if now - state.flapped < hold else 0


def note(state: NodeFlaps, *, now: float, before: int, after: int, window: float) -> NodeFlaps:
    """Fold one decision that took the fleet from `before` to `after` nodes' worth of
    replicas; releases older than `window` seconds are forgotten."""
    releases = state.releases
    flapped, level = state.flapped, state.level
    if after < before:
        releases += ((now, before),)
    elif after > before:
        given_up = [n for t, n in releases if now - t < window and n > before]
        if given_up:
            flapped, level = now, min(after, max(given_up))
    releases = tuple((t, n) for t, n in releases if now - t < window)
    if (releases, flapped, level) == (state.releases, state.flapped, state.level):
        return state
    return replace(state, releases=releases, flapped=flapped, level=level)
