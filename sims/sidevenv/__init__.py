"""One base for simulators that live in a side venv (LIBERO, MetaWorld, a gymnasium env whose
dependencies conflict with ours): the worker process and its loop (worker.py, run by the side
venv's interpreter; standard library and numpy only), the parent's handle on it (proc.py: start,
stop, framing, death), and the batched env over W workers (env.py). Observation arrays sit in
shared memory; requests and replies carry their arrays as raw bytes (sims/frames.py).
Importing this package imports nothing."""
