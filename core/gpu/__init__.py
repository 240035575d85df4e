"""The GPU half (`gpu.nvidia.com`) of the pure core.

`devices` is what discovery finds, `slices` what the node publishes, `configs` the opaque
configs a claim may carry, `cdi` the container edits of a prepared device, and `preparing`
the prepare/unprepare planner on top of the shared checkpoint.
"""
