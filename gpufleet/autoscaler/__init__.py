"""The autoscaler: telemetry and queue signals in, replica counts and node capacity out.

`core` holds the policies and what they decide with; `replay` is the trace replayer behind
`gpufleet simulate`, which calls exactly those policies at their real intervals on
observations delayed the way a real metrics pipeline delays them. The live controller
(issue 14) will call them too. Rule: replay > core, enforced by import-linter.
"""
