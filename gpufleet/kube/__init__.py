"""Kubernetes API adapters: the autoscaler's reads and writes through the official client.

Empty until the live autoscaler lands (issue 14): the scale subresource, custom resource
status, leader election. Rule: an adapter turns API objects into plain records for a pure
core and applies its decisions; it makes no decision itself.
"""
