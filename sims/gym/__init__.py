"""Any gymnasium env behind the VecEnv contract: "gym:<env id>" (docs/gym.md). mapping.py says
which observation columns are the state, the privileged state and the cameras, how actions map
to the env's action space and what counts as success; env.py runs B copies of the env (or a
gymnasium vector env) in this process; side.py runs them in a side venv's worker processes
(worker.py) for an env whose dependencies conflict with ours. Importing this package imports
nothing heavy."""
