"""Fork a daemon (double fork, new session) at import that would outlive grading."""
import os
import time

if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        for fd in range(3):
            os.close(fd)
        while True:
            time.sleep(0.05)
    os._exit(0)
