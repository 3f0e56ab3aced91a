"""What the command lines print: progress bars that suit a terminal and a log file alike."""
