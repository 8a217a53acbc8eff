"""`python -m embodied ...`: the same command as `embodied ...` (embodied/cli.py), for an
environment without the console script, such as a ROS 2 install's own python."""

import faulthandler
import signal
import sys

from embodied.cli import main

if __name__ == "__main__":
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # `kill -USR1 PID`: every thread's stack to stderr
    sys.exit(main())
