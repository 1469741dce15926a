"""Pure values and rules: offsets, the plan and planning, reconciling the group with the offset log, the
manifest, the write check, lag health, validation and DDL. No I/O here.
"""
