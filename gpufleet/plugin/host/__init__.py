"""The plugin's host files: device nodes, the driver's user-space files for CDI, and the
CDI spec directories it writes.

Rule: what the host lacks is left out of an answer, never invented; writes are atomic.
"""
