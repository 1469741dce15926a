"""The four steps side by side: plan, write (the driver's half), commit; and replay and lag. They call
core/ for the rules and kafka/, output/ and spark/ for the I/O.
"""
