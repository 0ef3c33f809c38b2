"""The auto-tuner: search spaces, ask/tell strategies, a learned cost model, isolated measurement,
the SQLite tuning database and the simulation runner that replays recorded timings.

Modules import nothing GPU-side at import time; the pipeline loads the runtime lazily.
"""
