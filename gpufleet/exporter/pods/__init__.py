"""Who holds each device: the kubelet's pod-resources view (with its device checkpoint)
and `/proc` cgroups for processes, read into the core's plain records.

Rule: never on the scrape or collection path (refreshed in the background), never raises
into the collector; failures are counted and the last good view ages out.
"""
