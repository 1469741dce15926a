"""The output: locations (local paths and object stores), the offset log, the batch store, and one sink per
format (the Parquet layout, Delta, Iceberg) behind one small interface (:mod:`.sink`).
"""
