"""What the command lines print, and how their processes end.

    progress.py  one progress-bar helper that suits a terminal and a log file alike
    usage.py     the program name a usage line shows: its own, as a console script or a module; the
                 line a Ctrl-C ends a resumable command with
    terminal.py  a markdown report as a terminal prints it (figure links named, not drawn)
    sizes.py     a number of bytes as a line of output states it
    shutdown.py  a process's exit without the interpreter's last scans of every object
"""
